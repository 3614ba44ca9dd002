"""`ctpipe models reproduce` for every kind of task: the built-in regression and causal LM and a user's task
outside the package (tabular classification: test_models_reproduce.py) are rebuilt bit for bit from a version
registered by the pipeline's own steps; a user's task whose code changed since is refused, naming its module.

End to end (e2e): each task registers one tiny version (a few steps, the local launcher's ranks) and rebuilds it,
~30-60 s a task on this shared CPU, so CI's default run (`-m "not e2e"`) leaves it to CTPIPE_E2E=1."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.tracking import local_tracking_uri
from ctpipe.components.run_config import resolve_config
from ctpipe.pipelines.cli.main import main
from tests.fixtures.diabetes import write_diabetes
from tests.fixtures.registered import SHORT_TRAINING, register_through_the_steps

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


USER_MODULE = "my_repro_task"
USER_TASK = textwrap.dedent('''
    """A user's churn model outside ctpipe: its own network on the tabular family."""
    import torch
    from torch import nn

    from ctpipe.task import Inputs, tabular_task


    class TinyNet(nn.Module):
        def __init__(self, inputs: Inputs, width: int) -> None:
            super().__init__()
            self.embeddings = nn.ModuleList(nn.Embedding(size, 2) for size in inputs.categorical)
            self.body = nn.Sequential(nn.Linear(inputs.numeric + 2 * len(inputs.categorical), width), nn.ReLU())
            self.head = nn.Linear(width, inputs.outputs)

        def forward(self, x_num: torch.Tensor, x_cat: torch.Tensor) -> torch.Tensor:
            parts = [x_num] + [emb(x_cat[:, i]) for i, emb in enumerate(self.embeddings)]
            return self.head(self.body(torch.cat(parts, dim=1)))


    def make_task(width: int = 8):
        return tabular_task("my_repro", model=lambda inputs: TinyNet(inputs, width))
''')


def _regression(root):
    data = write_diabetes(root / "data")
    return resolve_config(settings=["task.name=tabular_regression", "data.label=target", "data.key=null", *SHORT_TRAINING]), data


def _causal_lm(root):
    from ctpipe.components.tasks import load_task

    settings = ["task.name=causal_lm", *SHORT_TRAINING]
    load_task(resolve_config(settings=settings).task).demo.write_data(str(root / "data"), days=2)
    # As `ctpipe run --task causal_lm` resolves it on its demo data: the demo layer (key, text column) under --set.
    return resolve_config(settings=settings, data_uri=str(root / "data"), demo=True), root / "data"


def _user_task(root):
    (root / "user").mkdir()
    (root / "user" / f"{USER_MODULE}.py").write_text(USER_TASK)
    write_demo_data(root / "data", days=2, rows_per_day=150, seed=3)
    settings = ["data.key=customer_id", f"task.entrypoint={USER_MODULE}:make_task", "task.options.width=8", *SHORT_TRAINING]
    return resolve_config(settings=settings), root / "data"


TASKS = {"tabular_regression": _regression, "causal_lm": _causal_lm, "user_task": _user_task}


@pytest.fixture(scope="module", params=sorted(TASKS))
def registered(request, tmp_path_factory):
    """(task, home, root) with version 1 registered through the steps; a user's task importable from root/user
    here and in the training ranks (PYTHONPATH), as `PYTHONPATH=... ctpipe run` has it."""
    root = tmp_path_factory.mktemp(request.param)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(root / "user"))
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(root / "user"), os.environ.get("PYTHONPATH")))))
        config, data = TASKS[request.param](root)
        register_through_the_steps(config, data, root / "home", root / "work")
        # A task's own model name (causal_lm: ctpipe-causal-lm): `ctpipe models` is told it, as for any model.
        yield request.param, ["--home", str(root / "home"), "--model-name", config.registry.model_name], root


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_every_kind_of_task_is_rebuilt_bit_identical(registered, capsys, tmp_path):
    task, where, _ = registered
    code, out, err = _run(capsys, "models", "reproduce", "1", *where, "--json")
    assert code == 0, out + err
    result = json.loads(out)
    assert result["identical"] is True, result
    assert result["reproduced_weights_sha256"] == result["registered_weights_sha256"]
    assert result["max_param_diff"] == 0.0 and result["max_metric_diff"] == 0.0 and result["metrics"]
    assert result["platform_differences"] == []
    code, out, _ = _run(capsys, "models", "show", "1", *where, "--json")
    assert code == 0 and json.loads(out)["reproduction"]["result"] == "identical"
    # The version's model card says so too, whatever the task's card holds.
    import mlflow.artifacts

    run_id = json.loads(out)["run_id"]
    card = Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="reports/model_card.md",
                                                    dst_path=str(tmp_path), tracking_uri=local_tracking_uri(where[1])))
    assert "## Reproduction" in card.read_text() and "bit-identical" in card.read_text()


def test_a_user_task_whose_code_changed_is_refused_naming_its_module(registered, capsys):
    task, where, root = registered
    if task != "user_task":
        pytest.skip("the user's own module only")
    source = root / "user" / f"{USER_MODULE}.py"
    original = source.read_text()
    source.write_text(original.replace("width: int = 8", "width: int = 9"))
    try:
        code, _, err = _run(capsys, "models", "reproduce", "1", *where)
    finally:
        source.write_text(original)
    assert code == 2 and "Traceback" not in err
    assert f"module '{USER_MODULE}'" in err and "source_sha256: recorded" in err, err
