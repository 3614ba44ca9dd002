"""What registration logs on the candidate's run before any version exists: the export, the pyfunc, the rest.

``log_run_artifacts`` builds the pyfunc (``build_pyfunc_model``: the export, the code it imports, pinned
requirements, signature, input example, the manifest of its files), logs it with the export, checks that the
logged pyfunc serves as evaluated (``register_serving.py``), then logs the reference files, the reports and the
model card with the check's verdict. Re-logging on a retry overwrites the same paths.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from ctpipe.components.lib.atomic_files import atomic_write_text, naming_path
from ctpipe.components.lib.data.snapshot import Snapshot, first_rows
from ctpipe.components.lib.handoffs import read_blessing
from ctpipe.components.lib.registry.model_files import MANIFEST_FILE
from ctpipe.components.lib.tracking import RetryPolicy, log_step
from ctpipe.components.steps.register.serving_check import ServingCheck, serving_standby

MODEL_ARTIFACT_DIR = "ctpipe"
MODEL_FILE = "model.pt"
PYFUNC_ARTIFACT_PATH = "model"
# Rows of the input example stored with the pyfunc (its signature is inferred from them).
EXAMPLE_ROWS = 5
REFERENCE_FILES = ("suite.json", "reference_stats.json")


def pip_requirements() -> list[str]:
    """Pinned requirements of the pyfunc model, given explicitly (inference would cost ~10 s)."""
    import fsspec
    import mlflow
    import numpy
    import pandas
    import pyarrow
    import torch
    import yaml

    return [
        f"mlflow=={mlflow.__version__}",
        f"torch=={torch.__version__.split('+')[0]}",
        f"pandas=={pandas.__version__}",
        f"numpy=={numpy.__version__}",
        f"pyarrow=={pyarrow.__version__}",
        f"fsspec=={fsspec.__version__}",
        f"pyyaml=={yaml.__version__}",
    ]


def with_optional_key(signature, snapshot: Snapshot):
    """``signature`` with the data's key as an optional input column: MLflow's schema enforcement drops columns the
    signature does not name, and the prediction log needs the key a request carries to join its label later."""
    from mlflow.models import infer_signature
    from mlflow.types import ColSpec, Schema

    key = snapshot.schema.key
    if not key or key in signature.inputs.input_names():
        return signature
    (spec,) = infer_signature(first_rows(snapshot, EXAMPLE_ROWS)[[key]]).inputs.inputs
    signature.inputs = Schema([*signature.inputs.inputs, ColSpec(spec.type, key, required=False)])
    return signature


def build_pyfunc_model(model_file: Path, snapshot: Snapshot, out_dir: Path) -> Path:
    """Save the pyfunc wrapper into ``out_dir/model``: the export, the code it imports (``code_paths``), pinned
    requirements, signature, input example, the export's digest in its config, and the manifest of its files."""
    import mlflow.pyfunc
    from mlflow.models import infer_signature

    from ctpipe.components.lib.registry.model_files import (
        sha256_file,
        shipped_sources,
        stage_code,
        write_manifest,
    )
    from ctpipe.components.steps.register import pyfunc_entry
    from ctpipe.components.steps.register.pyfunc_model import EXPORT_DIGEST, KEY_COLUMN
    from ctpipe.components.tasks.export import load_model_export
    from ctpipe.components.tasks.outputs import check_served_order, check_served_rows

    example = first_rows(snapshot, EXAMPLE_ROWS)[snapshot.schema.all_features]
    exported = load_model_export(model_file)
    output = exported.serve(example)
    # The pyfunc's callers pair its output rows with their input rows: refused before any version exists.
    check_served_rows(exported.task, output, len(example))
    check_served_order(exported.task, output, exported.serve(example.iloc[::-1]))
    staged = stage_code(shipped_sources(exported.task_record), out_dir / "code-staging")
    target = out_dir / PYFUNC_ARTIFACT_PATH
    mlflow.pyfunc.save_model(
        path=str(target),
        python_model=pyfunc_entry.__file__,
        artifacts={"export": str(model_file)},
        code_paths=[str(path) for path in staged],
        # Read by the loader before it unpickles the export (pyfunc_model.check_export_digest).
        model_config={EXPORT_DIGEST: sha256_file(model_file), KEY_COLUMN: snapshot.schema.key},
        signature=with_optional_key(infer_signature(example, output), snapshot),
        input_example=example,
        pip_requirements=pip_requirements(),
        metadata={"ctpipe_format": exported.metadata.get("format", "ctpipe.model/v1")},
    )
    write_manifest(target)
    return target


def log_run_artifacts(
    tracking_uri: str,
    run_id: str,
    model_path: str,
    snapshot: Snapshot,
    reports: dict[str, str],
    blessing_path: str,
    retry: RetryPolicy,
) -> tuple[str, ServingCheck]:
    """Everything the version needs, on its source run (re-logging on retry overwrites the same paths): the export
    and the pyfunc first, then the serving check of the pyfunc as logged, then the reports, the model card with
    the check's verdict. Returns the pyfunc manifest's SHA-256 and the check."""
    from ctpipe.components.lib.registry.model_files import sha256_file
    from ctpipe.components.steps.register.register_serving import card_with_serving_check, check_logged_model

    # The serving check's clean interpreter imports its libraries while the pyfunc is built and logged.
    with serving_standby() as standby, tempfile.TemporaryDirectory(prefix="ctpipe-register-") as tmp, naming_path(tmp):
        model_file = Path(tmp) / MODEL_FILE
        shutil.copyfile(model_path, model_file)  # the pyfunc model keeps the file's name
        pyfunc_dir = build_pyfunc_model(model_file, snapshot, Path(tmp))
        pyfunc_sha256 = sha256_file(pyfunc_dir / MANIFEST_FILE)
        log_step(tracking_uri, run_id, "registration", retry=retry,
                 files={f"{MODEL_ARTIFACT_DIR}/{MODEL_FILE}": model_file, PYFUNC_ARTIFACT_PATH: pyfunc_dir})
        serving = check_logged_model(tracking_uri, run_id, PYFUNC_ARTIFACT_PATH, pyfunc_sha256, model_file, snapshot,
                                     warm=standby)
        card = card_with_serving_check(reports.get("model_card"), serving, Path(tmp) / "model_card.md")
        kept = read_blessing(blessing_path).prediction_reference
        if kept is not None:  # what this model predicted on its test split: the next evaluation's prediction drift
            atomic_write_text(Path(tmp) / "predictions.json", json.dumps(kept))
        files = {
            **{f"reference/{name}": snapshot.root / name for name in REFERENCE_FILES},
            **({"reference/predictions.json": Path(tmp) / "predictions.json"} if kept is not None else {}),
            **{f"reports/{name}.md": path for name, path in {**reports, "model_card": card}.items()},
            "reports/blessing.json": blessing_path,
        }
        log_step(tracking_uri, run_id, "registration", files=files, retry=retry)
    return pyfunc_sha256, serving
