"""What ci/smoke_images.sh runs inside the component image to drive KFP steps as a cluster does.

    python /ci/smoke_steps.py prepare WORK                  # demo data, the resolved config (WORK/config.json)
    python /ci/smoke_steps.py command STEP WORK [IN=TASK/OUT ...]  # WORK/STEP.argv: the container's command
    python /ci/smoke_steps.py outputs STEP WORK             # check what the step wrote, as KFP's launcher would read it
    python /ci/smoke_steps.py load-export PATH DATA         # load the export (weights_only) and serve demo rows

``command`` writes the step's command and arguments from its compiled component (the same ``sh -c ... python3
-m kfp.dsl.executor_main`` a cluster's pod runs), NUL-separated, with ``{{$}}`` replaced by the executor input
KFP's driver gives its launcher (backend/src/v2/driver: ``provisionOutputs``): output artifacts under the pipeline
root (``minio://`` URIs, which the SDK reads and writes under ``/minio``), output parameters at
``/tmp/kfp/outputs/NAME``, the executor output at ``/tmp/kfp_outputs/output_metadata.json``; input artifacts are the
producer's, with the metadata its executor output recorded. The smoke script mounts one folder at ``/minio`` in
every container: the object store and the launcher's copies in one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PIPELINE_ROOT = "minio://mlpipeline/v2/artifacts/ctpipe-smoke/run-1"
OUTPUT_METADATA = "/tmp/kfp_outputs/output_metadata.json"
DATA_IN_CONTAINER = "/data"
# A tiny run that still trains: two ranks, a few steps, checkpoints to select from.
SETTINGS = [
    "data.key=customer_id",
    "train.workers=2",
    "train.max_steps=8",
    "train.warmup_steps=2",
    "train.eval_every=4",
    "train.checkpoint_every=4",
]


def prepare(work: Path) -> None:
    """Demo data under WORK/data, and the config resolved for it as prepare_run resolves a run's."""
    from ctpipe.components.lib.data.demo import write_demo_data
    from ctpipe.components.run_config import resolve_config

    write_demo_data(work / "data", days=3, rows_per_day=400, seed=1)
    config = resolve_config(settings=SETTINGS, data_uri=DATA_IN_CONTAINER, demo=True)
    (work / "config.json").write_text(config.to_json())


def _component(step: str):
    from importlib import import_module

    return getattr(import_module(f"ctpipe.components.steps.{step}.component"), step)


def task_name(step: str) -> str:
    return step.replace("_", "-")


def _is_artifact(type_name: str) -> bool:
    return "@" in type_name  # artifacts are typed schema@version (system.Dataset@0.0.1); parameters are not


def executor_input(step: str, work: Path, inputs: dict[str, str]) -> dict:
    """The executor input KFP's driver provisions for STEP, with parameters from WORK and IN=TASK/OUT artifacts."""
    spec = _component(step).component_spec
    config_json = (work / "config.json").read_text()
    known = {"config_json": config_json, "data_uri": DATA_IN_CONTAINER, "mlflow_tracking_uri": "", "mlflow_run_id": "",
             "data_fingerprint": ""}
    parameters = {name: known[name] for name in spec.inputs or {} if name in known}
    artifacts = {}
    for name, source in inputs.items():
        producer, key = source.split("/")
        recorded = work / "outputs" / producer / "output_metadata.json"
        if recorded.is_file():
            artifact = dict(json.loads(recorded.read_text())["artifacts"][key]["artifacts"][0])
        else:  # the training ranks, started as the train step's job starts them, record no executor output
            artifact = {"name": key, "uri": f"{PIPELINE_ROOT}/{producer}/{key}", "metadata": {}}
        artifact["type"] = {"schemaTitle": spec.inputs[name].type.split("@")[0], "schemaVersion": "0.0.1"}
        artifacts[name] = {"artifacts": [artifact]}
    outputs = {
        "artifacts": {
            name: {"artifacts": [{
                "name": name,
                "type": {"schemaTitle": output.type.split("@")[0], "schemaVersion": "0.0.1"},
                "uri": f"{PIPELINE_ROOT}/{task_name(step)}/{name}",
                "metadata": {},
            }]}
            for name, output in (spec.outputs or {}).items() if _is_artifact(output.type)
        },
        "parameters": {
            name: {"outputFile": f"/tmp/kfp/outputs/{name}"}
            for name, output in (spec.outputs or {}).items() if not _is_artifact(output.type)
        },
        "outputFile": OUTPUT_METADATA,
    }
    return {"inputs": {"parameterValues": parameters, "artifacts": artifacts}, "outputs": outputs}


def command(step: str, work: Path, inputs: dict[str, str]) -> list[str]:
    """The step's container command and arguments, as compiled, with the executor input in place of ``{{$}}``."""
    container = _component(step).component_spec.implementation.container
    text = json.dumps(executor_input(step, work, inputs))
    return [text if part == "{{$}}" else part for part in [*container.command, *container.args]]


def check_outputs(step: str, work: Path) -> None:
    """What the launcher would upload: the executor output and, for each output artifact, its files."""
    written = json.loads((work / "outputs" / task_name(step) / "output_metadata.json").read_text())
    for name, listed in written.get("artifacts", {}).items():
        uri = listed["artifacts"][0]["uri"]
        local = Path("/minio") / uri.removeprefix("minio://")
        if not local.exists():
            sys.exit(f"{step}: output artifact {name} ({uri}) was not written at {local}")
    print(json.dumps({"step": step, "parameters": written.get("parameterValues", {}),
                      "artifacts": sorted(written.get("artifacts", {}))}))


def load_export(path: Path, data: Path) -> None:
    """Load the export as evaluate and the pyfunc do (``torch.load(weights_only=True)``) and serve demo rows."""
    import pandas as pd

    from ctpipe.components.tasks.export import load_model_export

    exported = load_model_export(path)
    rows = pd.read_parquet(next(data.rglob("*.parquet"))).head(8)
    served = exported.serve(rows)
    if len(served) != len(rows):
        sys.exit(f"the export served {len(served)} rows for {len(rows)}")
    print(json.dumps({"export": str(path), "step": exported.metadata.get("step"), "served_rows": len(served),
                      "columns": list(served.columns)}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("prepare").add_argument("work", type=Path)
    cmd = sub.add_parser("command")
    cmd.add_argument("step")
    cmd.add_argument("work", type=Path)
    cmd.add_argument("inputs", nargs="*", metavar="IN=TASK/OUT")
    out = sub.add_parser("outputs")
    out.add_argument("step")
    out.add_argument("work", type=Path)
    export = sub.add_parser("load-export")
    export.add_argument("path", type=Path)
    export.add_argument("data", type=Path)
    args = parser.parse_args(argv)
    if args.what == "prepare":
        prepare(args.work)
    elif args.what == "command":
        inputs = dict(item.split("=", 1) for item in args.inputs)
        argv_out = command(args.step, args.work, inputs)
        (args.work / f"{args.step}.argv").write_bytes(b"".join(part.encode() + b"\0" for part in argv_out))
    elif args.what == "outputs":
        check_outputs(args.step, args.work)
    else:
        load_export(args.path, args.data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
