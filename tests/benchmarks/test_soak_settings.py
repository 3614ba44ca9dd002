"""benchmarks/soak.py: its run settings are a valid config, and a watcher's config error stops the soak."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.run_config import load_config
from tests.fixtures.paths import REPO_ROOT


def _load_soak():
    sys.path.insert(0, str(REPO_ROOT / "benchmarks"))  # soak.py imports soak_audit beside it
    try:
        spec = importlib.util.spec_from_file_location("soak", REPO_ROOT / "benchmarks" / "soak.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(REPO_ROOT / "benchmarks"))


soak = _load_soak()


def test_run_settings_are_a_valid_config():
    # Before: evaluate.bootstrap_samples=50, which the config rejects (>= 200): every watcher exited 2
    # and the soak waited for its round timeout, 15 min a round.
    config = load_config(None, soak.RUN_SETTINGS)
    assert config.train.max_steps == soak.MAX_STEPS
    soak.check_settings(soak.RUN_SETTINGS)


def test_a_bad_setting_stops_the_soak_before_any_round():
    with pytest.raises(ConfigError, match="bootstrap_samples"):
        soak.check_settings([*soak.RUN_SETTINGS, "evaluate.bootstrap_samples=50"])


def test_a_watcher_usage_error_stops_the_soak(tmp_path):
    decisions = [{"action": "error", "exit_code": 2, "stderr": "ctpipe watch: error: invalid config value"}]
    with pytest.raises(SystemExit, match="invalid config value"):
        soak.stop_on_user_error(decisions)
    soak.stop_on_user_error([{"action": "run"}, {"action": "error", "exit_code": 1, "stderr": "MLflow down"}])
