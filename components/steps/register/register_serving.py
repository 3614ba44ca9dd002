"""Registration's serving check: the pyfunc as logged on the run, downloaded, verified, served in a clean process.

The expected output is what the evaluated export serves for the same test rows in the step's own process
(the export evaluation scored, loaded by the code that scored it); the served one comes from the model's
files as the artifact store holds them, checked against the manifest digest computed before they were logged.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.components.lib.data.snapshot import Snapshot
from ctpipe.components.lib.registry.model_files import (
    UntrustedModelError,
    shipped_sources,
    verify_model_dir,
)
from ctpipe.components.lib.warm_start.standby import Standby
from ctpipe.components.steps.register.serving_check import SERVING_CHECK_ROWS, ServingCheck, check_serving


def check_logged_model(tracking_uri: str, run_id: str, artifact_path: str, pyfunc_sha256: str, model_file: Path,
                       snapshot: Snapshot, *, warm: Standby | None = None) -> ServingCheck:
    """Download the run's logged pyfunc, verify it against ``pyfunc_sha256`` and check that it serves the first
    test rows as the export ``model_file`` does here (in the standby ``warm`` when it answers)."""
    import mlflow.artifacts

    from ctpipe.components.lib.data.snapshot import first_rows
    from ctpipe.components.tasks.export import load_model_export

    exported = load_model_export(model_file)
    rows = first_rows(snapshot, SERVING_CHECK_ROWS)[snapshot.schema.all_features]
    expected = exported.serve(rows)
    shipped = [source.stem if source.is_file() else source.name for source in shipped_sources(exported.task_record)]
    with tempfile.TemporaryDirectory(prefix="ctpipe-logged-model-") as tmp:
        local = Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=artifact_path, dst_path=tmp,
                                                         tracking_uri=tracking_uri))
        try:
            verify_model_dir(local, pyfunc_sha256)
        except UntrustedModelError as err:
            return ServingCheck(False, f"the logged model is not the one built: {err}", 0.0)
        return check_serving(local, rows, expected, shipped, warm=warm)


def card_with_serving_check(card: str | None, check: ServingCheck, out: Path) -> str:
    """The model card at ``card`` with a "Serving check" section, written to ``out`` ('' when there is no card)."""
    if not card or not Path(card).is_file():
        return ""
    verdict = "passed" if check.servable else "FAILED: not servable, the champion was not moved to it"
    section = [
        "", "## Serving check", "",
        f"- {verdict}",
        f"- {check.reason}",
        f"- loaded with mlflow.pyfunc in a clean `python -I` (nothing of ctpipe but the model's own code) from the "
        f"files logged on the run ({check.seconds:.1f} s)",
        "",
    ]
    atomic_write_text(out, Path(card).read_text().rstrip("\n") + "\n" + "\n".join(section))
    return str(out)
