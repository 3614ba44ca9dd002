"""The train step only launches the ranks: its process must not pay for importing torch or MLflow."""

from __future__ import annotations

import subprocess
import sys


def test_the_launching_module_imports_neither_torch_nor_mlflow():
    code = (
        "import sys, ctpipe.components.steps.train.launch, ctpipe.components.steps.train.launchers.local; "
        "print(','.join(n for n in ('torch', 'mlflow', 'pandas') if n in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == ""


def test_the_result_file_name_is_shared_with_the_worker():
    from ctpipe.components.steps.train import launch
    from ctpipe.components.steps.train.launchers.base import RESULT_FILE

    assert launch.RESULT_FILE == RESULT_FILE == "train_result.json"
