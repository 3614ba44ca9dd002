"""The page of the report that started the run (the watcher's drift or decay page), as the first step's KFP HTML output.

The watcher writes the page before the run exists, so it reaches the run as where it is and what it is: the
pipeline parameters ``trigger_report_uri`` (an MLflow ``runs:/`` URI the watcher logged it to, or a local path or
fsspec URI for a local run) and ``trigger_report_sha256``. ``prepare_run`` (the step every run runs) copies it into
its ``trigger_report`` output, which the KFP UI renders (an ``HTML`` artifact: the step's Visualization). The UI
renders whatever HTML it is given, so a page whose bytes are not the ones the watcher wrote (changed in the store
since, or given without a digest) is never published: a short page says why instead, and the run goes on (the page
is a record of why the run started, not an input of it). A run without a trigger report gets a one-line page.
"""

from __future__ import annotations

import hashlib
import html
import tempfile
from pathlib import Path

from ctpipe.components.lib.atomic_files import atomic_write_text

# A watcher's page is a few hundred KB at most (one SVG per column): anything far larger is not one.
MAX_PAGE_BYTES = 20_000_000
MLFLOW_SCHEMES = ("runs:/", "mlflow-artifacts:/", "models:/")


def read_page(uri: str, *, tracking_uri: str) -> bytes:
    """The bytes at ``uri``: an MLflow artifact URI through MLflow, anything else through fsspec."""
    if uri.startswith(MLFLOW_SCHEMES):
        import mlflow.artifacts

        with tempfile.TemporaryDirectory(prefix="ctpipe-trigger-page-") as tmp:
            local = mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=tmp, tracking_uri=tracking_uri)
            return Path(local).read_bytes()
    import fsspec

    with fsspec.open(uri, "rb") as f:
        return f.read(MAX_PAGE_BYTES + 1)


def publish_trigger_page(uri: str, sha256: str, out_path: str | Path, *, tracking_uri: str, trigger: str) -> str:
    """Write the trigger's page to ``out_path`` when its bytes match ``sha256``; else a page saying why not.
    Returns what was written: ``published``, ``none`` (no page given) or ``refused: <why>``."""
    if not uri:
        atomic_write_text(out_path, _note_page(f"Run started by trigger <b>{html.escape(trigger)}</b>, which comes "
                                               "with no report page (only the watcher's drift and decay runs do)."))
        return "none"
    status = _check(uri, sha256, tracking_uri=tracking_uri)
    if isinstance(status, bytes):
        out = Path(out_path)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.tmp")
        tmp.write_bytes(status)
        tmp.replace(out)
        return "published"
    atomic_write_text(out_path, _note_page(f"The report page that started this run ({html.escape(uri)}) is not shown: "
                                           f"{html.escape(status)}. Its JSON and page are on the MLflow run tagged "
                                           "<code>ctpipe.drift_report_for</code> with this run's id."))
    return f"refused: {status}"


def _check(uri: str, sha256: str, *, tracking_uri: str) -> bytes | str:
    """The page's bytes when they are the ones the watcher wrote, else why not."""
    if not sha256:
        return "no trigger_report_sha256 came with it, and an unverified page is never rendered"
    try:
        page = read_page(uri, tracking_uri=tracking_uri)
    except Exception as err:  # noqa: BLE001 - an unreachable store costs the page, never the run
        return f"it could not be read ({type(err).__name__}: {str(err)[:200]})"
    if len(page) > MAX_PAGE_BYTES:
        return f"it is over {MAX_PAGE_BYTES} bytes, larger than any report page"
    found = hashlib.sha256(page).hexdigest()
    if found != sha256.strip().lower():
        return (f"its SHA-256 is {found[:12]}, not the {sha256[:12]} the watcher recorded when it wrote it "
                "(changed in the store since)")
    return page


def _note_page(text: str) -> str:
    return f"<!doctype html><html><head><meta charset='utf-8'><title>trigger report</title></head><body><p>{text}</p></body></html>\n"
