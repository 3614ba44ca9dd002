"""A user's task in about 40 lines on the minimal API (components/tasks/public.py), through the whole local
pipeline; the reports describe the user's network, not ctpipe's default MLP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

USER_TASK = textwrap.dedent('''
    """A churn model of my own: a two-layer network with a wide embedding per categorical column."""
    import torch
    from torch import nn

    from ctpipe.task import Inputs, TaskMetric, tabular_task


    class ChurnNet(nn.Module):
        def __init__(self, inputs: Inputs, width: int) -> None:
            super().__init__()
            self.embeddings = nn.ModuleList(nn.Embedding(size, 4) for size in inputs.categorical)
            self.body = nn.Sequential(nn.Linear(inputs.numeric + 4 * len(inputs.categorical), width), nn.ReLU())
            self.head = nn.Linear(width, inputs.outputs)

        def forward(self, x_num: torch.Tensor, x_cat: torch.Tensor) -> torch.Tensor:
            parts = [x_num] + [emb(x_cat[:, i]) for i, emb in enumerate(self.embeddings)]
            return self.head(self.body(torch.cat(parts, dim=1)))


    def share_predicted_churn(targets, probabilities) -> float:
        return float((probabilities.argmax(axis=1) == 0).mean())


    def make_task(width: int = 24):
        return tabular_task(
            "my_churn",
            model=lambda inputs: ChurnNet(inputs, width),
            metrics={"predicted_churn": TaskMetric(share_predicted_churn, higher_is_better=True)},
        )
''')


def ctpipe(*args: str, home: Path, path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "CTPIPE_HOME": str(home), "MLFLOW_DISABLE_TELEMETRY": "true",
           "PYTHONPATH": os.pathsep.join(p for p in (str(path), os.environ.get("PYTHONPATH", "")) if p)}
    return subprocess.run([sys.executable, "-m", "ctpipe.pipelines.cli.main", *args], capture_output=True, text=True, env=env,
                          timeout=900)


def test_a_forty_line_user_task_runs_the_whole_pipeline(tmp_path):
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "my_churn.py").write_text(USER_TASK)
    assert len(USER_TASK.strip().splitlines()) <= 40
    home, user = tmp_path / "home", tmp_path / "user"
    written = ctpipe("demo-data", "--out", str(tmp_path / "data"), "--days", "3", "--rows-per-day", "300",
                     home=home, path=user)
    assert written.returncode == 0, written.stderr
    sets = ["data.key=customer_id", "task.entrypoint=my_churn:make_task", "task.options.width=24",
            "train.max_steps=60", "train.eval_every=20", "train.checkpoint_every=20", "train.warmup_steps=5",
            "evaluate.bootstrap_samples=200"]
    result = ctpipe("run", "--data", str(tmp_path / "data"), *[x for s in sets for x in ("--set", s)],
                    home=home, path=user)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads(Path(result.stdout.strip().splitlines()[-1]).read_text())
    assert all(v == "passed" for v in summary["steps"].values()), summary["steps"]
    assert "predicted_churn" in summary["metrics"]["candidate"]
    assert summary["model_name"] == "ctpipe-my-churn"
    root = home / "pipeline_root"
    card = next(root.glob("*/evaluate/model_card")).read_text()
    report = next(root.glob("*/sanity-checks/sanity_report")).read_text()
    [model_line] = [line for line in card.splitlines() if line.startswith("- model: ")]
    assert "ChurnNet" in model_line and '"parameters"' in model_line and "hidden" not in model_line
    assert "Model `ChurnNet`" in report and "parameters" in report
    blessing = json.loads(next(root.glob("*/evaluate/blessing")).read_text())
    assert blessing["model_config"]["kind"] == "ChurnNet" and blessing["model_config"]["width"] == 24
    assert blessing["model_config"]["parameters"] > 0
