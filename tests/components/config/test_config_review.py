"""Config values that were accepted but silently changed or dropped (a skeptical review's cases)."""

import pytest

from components.config import load_config
from components.errors import ConfigError


def test_duplicate_key_in_a_config_file_is_refused_naming_it(tmp_path):
    # PyYAML keeps the last of two equal keys: a second `train:` section silently dropped the first's settings.
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  max_steps: 200\ntrain:\n  lr: 0.01\n")
    with pytest.raises(ConfigError, match=r"run\.yaml.*'train'.*line 3"):
        load_config(path)
    path.write_text("train:\n  max_steps: 200\n  max_steps: 300\n")
    with pytest.raises(ConfigError, match=r"'max_steps'.*more than once"):
        load_config(path)
