"""benchmarks/soak_audit.py: the soak's zeros mean something only if its audit reports what it exists to catch."""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import mlflow
import pytest

from ctpipe.components.lib.tracking import local_tracking_uri
from ctpipe.components.lib.tracking.lineage import LINEAGE_DIGEST_TAG, version_lineage, write_lineage
from ctpipe.components.steps.evaluate.evaluate import evaluate_candidate
from ctpipe.components.steps.register.register import register_candidate
from tests.fixtures.paths import REPO_ROOT
from tests.fixtures.registry import fast_config, make_model, make_run, make_snapshot


def _load_audit():
    spec = importlib.util.spec_from_file_location("soak_audit", REPO_ROOT / "benchmarks" / "soak_audit.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("soak_audit", module)
    spec.loader.exec_module(module)
    return module


audit = _load_audit()


@pytest.fixture
def registered(tmp_path):
    """A registry holding one version registered by the real evaluate + register steps (champion)."""
    snap = make_snapshot(tmp_path)
    model = make_model(snap, tmp_path / "a.pt", steps=80, seed=0)
    config = fast_config()
    uri = local_tracking_uri(tmp_path / "home")
    run_id = make_run(uri, config, "p1")
    blessing, card = tmp_path / "blessing.json", tmp_path / "card.md"
    evaluate_candidate(str(model), str(snap), config, tracking_uri=uri, mlflow_run_id=run_id,
                       blessing_path=str(blessing), card_path=str(card))
    result = register_candidate(str(model), str(snap), str(blessing), config, tracking_uri=uri, mlflow_run_id=run_id,
                                pipeline_run_id="p1", trigger="new_data", reports={"model_card": str(card)})
    assert result.version == "1" and result.promoted
    return uri, mlflow.MlflowClient(uri, registry_uri=uri), config.registry.model_name


def test_a_complete_version_passes_and_a_version_without_its_split_lineage_does_not(registered, tmp_path):
    uri, client, name = registered
    clean = audit.audit_registry(uri)
    assert (clean["model_versions"], clean["inconsistent_registry_entries"]) == (1, 0), clean["registry_problems"]
    assert clean["champion_violations"] == [] and clean["champion"] == "1"

    # What the model was trained on (issue 10's split record) is lineage too: without it the version is half there.
    _relog_lineage(client, name, tmp_path, train_keys_sha256=None)
    broken = audit.audit_registry(uri)
    assert broken["inconsistent_registry_entries"] == 1
    assert "lineage train_keys_sha256" in broken["registry_problems"]["1"]

    # So is the identity of the task code that made it.
    _relog_lineage(client, name, tmp_path, task_code=None)
    assert "lineage task_code" in audit.audit_registry(uri)["registry_problems"]["1"]

    # A lineage file changed after registration (its digest no longer matches) is a problem, named.
    _relog_lineage(client, name, tmp_path, update_digest=False, data_uri="elsewhere")
    problems = audit.audit_registry(uri)["registry_problems"]["1"]
    assert any(p.startswith("lineage unreadable: LineageError") and "the version's tag ctpipe.lineage_sha256" in p
               for p in problems), problems
    # And so is a tag of the version missing.
    client.delete_model_version_tag(name, "1", "ctpipe.data_fingerprint")
    assert "tag ctpipe.data_fingerprint" in audit.audit_registry(uri)["registry_problems"]["1"]


def _relog_lineage(client, name, tmp_path, update_digest=True, **changes):
    """Log version 1's lineage again with ``changes`` (and, unless told otherwise, its new digest in the tag)."""
    version = client.get_model_version(name, "1")
    lineage = {**version_lineage(client, version), **changes}
    folder = tmp_path / f"relog-{len(list(tmp_path.glob('relog-*')))}"
    digest = write_lineage(folder / "lineage.json", lineage)
    client.log_artifact(version.run_id, str(folder / "lineage.json"), "ctpipe")
    if update_digest:
        client.set_model_version_tag(name, "1", LINEAGE_DIGEST_TAG, digest)


def test_a_champion_alias_the_history_does_not_explain_is_a_violation(registered):
    uri, client, name = registered
    client.set_registered_model_tag(name, "ctpipe.champion_history", json.dumps([]))
    violations = audit.audit_registry(uri)["champion_violations"]
    assert "alias champion is 1, the history ends at None" in violations
    assert "version 1 is tagged promoted but not in the history" in violations


def test_two_attempts_of_one_data_version_running_at_once_are_duplicate_runs(tmp_path):
    home = tmp_path / "home"

    def run_folder(pid: int, started: float, last_write: float) -> None:
        steps = home / "runs" / f"20260101-000000-{pid}" / "steps"
        steps.mkdir(parents=True)
        record = steps / "train.json"
        record.write_text(json.dumps({"started": started}))
        os.utime(record, (last_write, last_write))

    run_folder(101, started=1000.0, last_write=1100.0)
    run_folder(102, started=1200.0, last_write=1300.0)  # after 101 ended: a retry, not a duplicate
    records = [{"fingerprint": "f" * 64, "attempts": [{"pid": 101, "status": "lost"}, {"pid": 102, "status": "succeeded"}]}]
    assert audit.audit_runs(home, records)["duplicate_runs"] == 0

    run_folder(103, started=1250.0, last_write=1400.0)  # began while 102 was still writing
    records[0]["attempts"].append({"pid": 103, "status": "succeeded"})
    found = audit.audit_runs(home, records)
    assert found["overlapping_attempts"] == ["f" * 12] and found["duplicate_runs"] == 2  # overlap + 2nd success

    run_folder(104, started=2000.0, last_write=2100.0)  # a run no ledger attempt started
    assert audit.audit_runs(home, records)["runs_not_in_ledger"] == [str(home / "runs" / "20260101-000000-104")]


class _RunsCode:
    """Pickles as a call of ``exec``: what a tampered ``.metadata`` on a shared volume could hold."""

    def __init__(self, marker) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


def test_the_checkpoint_audit_reads_metadata_through_the_safe_reader_and_never_runs_code_from_it(tmp_path):
    """Before: the audit converted each checkpoint with DCP's dcp_to_torch_save, which unpickles `.metadata`
    with plain pickle.load, so auditing a tampered checkpoint ran its code. Now it reads through the same
    allowlisting reader as resume and export: a real checkpoint loads, a tampered one is reported unreadable."""
    import pickle

    import torch
    from torch import nn

    from ctpipe.components.engine import checkpointing as ckpt

    root = tmp_path / "home" / "pipeline_root" / "run1" / "train" / "checkpoints"
    model = nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    for step in (1, 2):
        ckpt.save_checkpoint(root, step, model=model, optimizer=opt, rank_state={}, meta={"step": step}, rank=0)
    clean = audit.audit_checkpoints(tmp_path / "home")
    assert (clean["complete_loaded"], clean["unreadable"]) == (2, [])

    marker = tmp_path / "code-ran"
    (ckpt.checkpoint_path(root, 2) / ".metadata").write_bytes(pickle.dumps(_RunsCode(marker)))
    found = audit.audit_checkpoints(tmp_path / "home")
    assert not marker.exists()
    assert found["complete_loaded"] == 1 and len(found["unreadable"]) == 1
    assert "TrainingError" in found["unreadable"][0] and "the checkpoint's DCP metadata" in found["unreadable"][0]


def test_the_checkpoint_audit_reports_a_checkpoint_whose_bytes_disagree_with_its_digests(tmp_path):
    """A file that was changed after the save may still load (flipped bytes in a shard load into other weights):
    the audit checks the digests saved with the checkpoint too."""
    import torch
    from torch import nn

    from ctpipe.components.engine import checkpointing as ckpt

    root = tmp_path / "home" / "pipeline_root" / "run1" / "train" / "checkpoints"
    model = nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    ckpt.save_checkpoint(root, 1, model=model, optimizer=opt, rank_state={}, meta={"step": 1}, rank=0)
    (ckpt.checkpoint_path(root, 1) / "meta.json").write_text('{"step": 2}')  # readable, but not what was saved
    found = audit.audit_checkpoints(tmp_path / "home")
    assert found["complete_loaded"] == 0 and len(found["unreadable"]) == 1
    assert "meta.json does not match its SHA-256" in found["unreadable"][0]
