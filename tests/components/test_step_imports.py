"""Each KFP step imports only the heavy libraries its work needs (issue 15).

A step is a fresh interpreter (a pod on a cluster), so every library it imports costs seconds at every
run. Each test runs, in a new process, what the step's function runs (the part that can run cheaply here)
and then reads ``sys.modules``: the libraries the step must not need are absent.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from ctpipe.components.lib.data.demo import write_demo_data


def _loaded_after(code: str, tmp_path: Path) -> list[str]:
    """Run ``code`` in a new interpreter; the heavy libraries loaded when it ends."""
    script = textwrap.dedent(code) + textwrap.dedent(
        """
        import json, sys
        from ctpipe.components.lib.timing import HEAVY_LIBRARIES
        print(json.dumps([n for n in HEAVY_LIBRARIES if n in sys.modules]))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_prepare_run_opens_the_mlflow_run_without_torch_or_great_expectations(tmp_path):
    write_demo_data(tmp_path / "data", days=2, rows_per_day=20, seed=0)  # it fingerprints the data (caching on)
    loaded = _loaded_after(
        f"""
        from ctpipe.components.steps.prepare_run.prepare import prepare_run
        prepared = prepare_run("", "train.max_steps=100", tracking_uri="sqlite:///{tmp_path}/mlflow.db",
                               pipeline_run_id="p1", trigger="manual", data_uri="{tmp_path}/data")
        assert prepared.mlflow_run_id and prepared.data_fingerprint
        """,
        tmp_path,
    )
    assert "mlflow" in loaded  # it did open the run
    assert "torch" not in loaded and "great_expectations" not in loaded, loaded


def test_validation_of_a_tabular_task_does_not_import_torch(tmp_path):
    write_demo_data(tmp_path / "data", days=2, rows_per_day=300)
    loaded = _loaded_after(
        f"""
        from ctpipe.components.run_config import load_config
        from ctpipe.components.steps.validate_data.validate import validate_data
        config = load_config(None, ["data.key=customer_id"])  # the demo's row id: a feature it would be an error
        result = validate_data("{tmp_path}/data", config, snapshot_dir="{tmp_path}/snapshot",
                               data_docs_path="{tmp_path}/docs.html", report_path="{tmp_path}/report.md",
                               tracking_uri="", mlflow_run_id="")
        assert sum(result.rows.values()) == 600, result.rows
        """,
        tmp_path,
    )
    assert "great_expectations" in loaded  # it did run the suite
    assert "torch" not in loaded, loaded



def test_validation_of_the_causal_lm_task_does_not_import_torch(tmp_path):
    from ctpipe.components.tasks.causal_lm.corpus import write_text_demo_data

    write_text_demo_data(str(tmp_path / "data"), days=2)
    loaded = _loaded_after(
        f"""
        from ctpipe.components.run_config import load_config
        from ctpipe.components.steps.validate_data.validate import validate_data
        config = load_config(None, ["task.name=causal_lm", "data.key=doc_id", "data.text_column=text"])
        result = validate_data("{tmp_path}/data", config, snapshot_dir="{tmp_path}/snapshot",
                               data_docs_path="{tmp_path}/docs.html", report_path="{tmp_path}/report.md",
                               tracking_uri="", mlflow_run_id="")
        assert sum(result.rows.values()) > 0, result.rows
        """,
        tmp_path,
    )
    assert "great_expectations" in loaded  # it did run the suite (with the text expectations)
    assert "torch" not in loaded, loaded

def test_checkpoint_selection_reads_the_index_without_torch(tmp_path):
    root = tmp_path / "checkpoints"
    for step in (50, 100):
        (root / f"step_{step:08d}").mkdir(parents=True)
        (root / f"step_{step:08d}" / ".complete").write_text("")
    (root / "index.json").write_text(json.dumps({"checkpoints": [
        {"step": 50, "metrics": {"val_accuracy": 0.9, "val_loss": 0.3}, "kept": True},
        {"step": 100, "metrics": {"val_accuracy": 0.8, "val_loss": 0.2}, "kept": True},
    ]}))
    loaded = _loaded_after(
        f"""
        from ctpipe.components.steps.select_checkpoint.select import select_best_checkpoint
        assert select_best_checkpoint("{root}", "val_accuracy", "max").step == 50
        """,
        tmp_path,
    )
    assert not {"torch", "mlflow", "great_expectations"} & set(loaded), loaded


def test_the_model_steps_import_no_great_expectations_and_no_kubernetes(tmp_path):
    loaded = _loaded_after(
        """
        import ctpipe.components.steps.sanity_checks.gate, ctpipe.components.steps.select_checkpoint.select, ctpipe.components.steps.evaluate.evaluate
        import ctpipe.components.steps.register.register
        from ctpipe.components.lib.config import Config
        from ctpipe.components.tasks import load_task
        load_task(Config().task)
        """,
        tmp_path,
    )
    assert not {"great_expectations", "kubernetes"} & set(loaded), loaded


def test_the_train_step_launches_ranks_without_torch_or_mlflow(tmp_path):
    loaded = _loaded_after(
        """
        import ctpipe.components.steps.train.launch, ctpipe.components.steps.train.launchers.factory
        import ctpipe.components.steps.train.launchers.local
        """,
        tmp_path,
    )
    assert not {"torch", "mlflow", "great_expectations"} & set(loaded), loaded
