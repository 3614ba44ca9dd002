"""The events of issue 46 in the long soak (``soak.py --days N --fast``, soak_long.py), each once, and their audit.

- a same-size mid-file edit: the labels of the first half of one partition shuffled, its size, last 64 KiB
  and mtime kept. The old cache key (listing, sizes, tails: ``tail_fingerprint``) does not change; the content
  fingerprint prepare_run keys the cache on (``content_fingerprint``) must, and the edited data is a data
  version of its own that gets trained and registered (else it counts as lost);
- a plain MLflow load: ``mlflow.pyfunc.load_model("models:/NAME/N")`` on the local file store, which writes
  MLflow's ``registered_model_meta`` into the stored model; ctpipe's verified loader must still accept it;
- one ``ctpipe gc`` with ``retention.keep_last_runs=1``; afterwards every link of every kept version (its run,
  the content run its pipeline run names, the runs its description addresses) must resolve.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from pathlib import Path
from typing import Any

import mlflow
import mlflow.pyfunc

from ctpipe.components.lib.data.files import scan_data_files
from ctpipe.components.lib.registry.model_files import write_manifest
from ctpipe.components.lib.registry.verified_model import download_verified
from ctpipe.components.lib.tracking import TRAINING_RUN_TAG, use_tracking
from ctpipe.testing.data_edits import TAIL_BYTES, shuffle_first_half, write_plain_parquet

# The event id of the edit made on day D: D + EDIT_EVENT (a multiple of 3, so the day's blessing rule holds).
EDIT_EVENT = 30_000
BIG_ROWS = 4_000  # the edited partition: over 64 KiB, so the edit falls before its tail
_RUNS_URI = re.compile(r"runs:/([0-9a-f]{32})/([^\s`)]+)")


def write_big_partition(data: Path, day: int, seed: int) -> Path:
    """Day ``day``'s partition with ``BIG_ROWS`` rows, plain-encoded (a label shuffle keeps its size)."""
    import datetime as dt

    from ctpipe.components.lib.data.demo import START_DATE, generate_day

    frame = generate_day(day, BIG_ROWS, seed, False, key_offset=day * 300 + seed * 10_000_000)
    part = data / f"date={(START_DATE + dt.timedelta(days=day)).isoformat()}" / "part-0.parquet"
    return write_plain_parquet(frame, part)


def tail_fingerprint(data: str) -> str:
    """The cache key prepare_run took before issue 46: the listing, the sizes and each file's last 64 KiB."""
    fs, listed = scan_data_files(data)
    sha = hashlib.sha256()
    for f in sorted(listed, key=lambda f: f.path):
        sha.update(f"{f.path}\0{f.size}\0".encode())
        with fs.open(f.full_path, "rb") as stream:
            stream.seek(max(f.size - TAIL_BYTES, 0))
            sha.update(hashlib.sha256(stream.read(TAIL_BYTES)).digest())
    return sha.hexdigest()


def edit_keeping_size_tail_and_mtime(part: Path) -> None:
    shuffle_first_half(part, "label")


class Echo(mlflow.pyfunc.PythonModel):
    """The smallest real pyfunc: what a plain ``mlflow.pyfunc.load_model`` loads."""

    def predict(self, context, model_input, params=None):
        return model_input


def stage_real_pyfunc(model_dir: Path) -> str:
    """A real pyfunc model in ``model_dir`` with ctpipe's manifest; its digest (``ctpipe.pyfunc_sha256``)."""
    mlflow.pyfunc.save_model(str(model_dir), python_model=Echo(), pip_requirements=[])
    return write_manifest(model_dir)


def plain_then_verified_load(uri: str, name: str, number: str) -> dict[str, Any]:
    """``mlflow.pyfunc.load_model`` of the version (as the MLflow UI and KServe do), then ctpipe's verified load."""
    use_tracking(uri)  # models:/ URIs resolve through the registry URI
    mlflow.pyfunc.load_model(f"models:/{name}/{number}")
    source = mlflow.MlflowClient(uri, registry_uri=uri).get_model_version(name, number).source
    written = (Path(source.removeprefix("file://")) / "registered_model_meta").is_file()
    problems = [] if written else [f"version {number}: the plain load wrote no registered_model_meta into the store, "
                                   "so the soak did not exercise what it is to exercise"]
    with tempfile.TemporaryDirectory() as tmp:
        try:
            download_verified(f"models:/{name}/{number}", Path(tmp) / "verified", tracking_uri=uri)
        except Exception as err:
            problems.append(f"version {number}: refused by the verified loader after a plain MLflow load: {err}"[:300])
    return {"registered_model_meta_written": written, "problems": problems}


def link_problems(client: Any, versions: list[Any]) -> list[str]:
    """Every link of every kept version that does not resolve: its run, its content run, the runs its description
    addresses (each active, with the artifact it is linked for)."""
    problems = []
    for version in versions:
        links = {version.run_id: "ctpipe/model.pt"}
        try:
            training = client.get_run(version.run_id).data.tags.get(TRAINING_RUN_TAG)
        except Exception as err:
            problems.append(f"version {version.version}: its run {version.run_id} is gone ({type(err).__name__})")
            continue
        if training:
            links[training] = "validation/data_docs.html"
        links.update({run: path for run, path in _RUNS_URI.findall(version.description or "")})
        for run_id, path in links.items():
            try:
                if client.get_run(run_id).info.lifecycle_stage != "active":
                    raise RuntimeError("deleted")
                with tempfile.TemporaryDirectory() as tmp:
                    client.download_artifacts(run_id, path, tmp)
            except Exception as err:
                problems.append(f"version {version.version} links runs:/{run_id}/{path}, which is gone "
                                f"({type(err).__name__})")
    return problems
