"""The champion leaves the pipeline: a fresh virtual environment with torch (pinned, installed first as the README
installs it) and then only the model's own requirements.txt loads the downloaded champion from a folder outside the
checkout and predicts, with a predicted-class column. Nothing of ctpipe is installed there: the code comes from the
model's own code/ folder.

Slow: it installs MLflow and its dependencies into a new environment (pip's cache and local indexes make it
minutes, not more).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctpipe.components.lib.registry.model_files import own_package
from ctpipe.components.lib.registry.verified_model import download_verified
from tests.fixtures.champion import champion  # noqa: F401  (the session fixture)
from tests.fixtures.paths import REPO_ROOT as ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PREDICT = """
import json, sys
import mlflow.pyfunc, pandas as pd
model = mlflow.pyfunc.load_model(sys.argv[1])
rows = pd.read_parquet(sys.argv[2])
served = model.predict(rows)
print(json.dumps({"columns": [str(c) for c in served.columns], "rows": served.to_dict(orient="records"),
                  "code": sys.modules[sys.argv[3]].__file__}))
"""


def _env() -> dict[str, str]:
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "CTPIPE_HOME")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "MLFLOW_DISABLE_TELEMETRY": "true"}


def test_a_fresh_environment_with_only_the_models_requirements_predicts_a_class(champion, tmp_path):  # noqa: F811
    model = download_verified(champion.uri, tmp_path / "champion", tracking_uri=champion.tracking_uri)
    assert not model.resolve().is_relative_to(ROOT)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    import torch

    subprocess.run([*pip, f"torch=={torch.__version__.split('+')[0]}"], check=True, cwd=tmp_path, env=_env(),
                   timeout=1200)
    subprocess.run([*pip, "-r", str(model / "requirements.txt")], check=True, cwd=tmp_path, env=_env(), timeout=1800)
    absent = subprocess.run([str(python), "-c", f"import {own_package()}"], cwd=tmp_path, env=_env(),
                            capture_output=True, text=True)
    assert absent.returncode != 0 and "No module named" in absent.stderr  # ctpipe is not installed there

    rows = champion.snapshot.frame("test")[champion.snapshot.schema.all_features].head(3)
    rows_file = tmp_path / "rows.parquet"  # the test rows with their dtypes (JSON would turn 20.0 into 20)
    rows.to_parquet(rows_file)
    done = subprocess.run([str(python), "-c", PREDICT, str(model), str(rows_file), own_package()], cwd=tmp_path,
                          env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "served here with" not in done.stderr  # the shipped code is the code it was trained with
    out = json.loads(done.stdout.strip().splitlines()[-1])
    classes = champion.snapshot.schema.classes
    assert out["columns"] == ["predicted_class", *classes]
    assert all(row["predicted_class"] in classes for row in out["rows"]) and len(out["rows"]) == 3
    assert Path(out["code"]).resolve().is_relative_to((model / "code").resolve())
