"""Staging the train step's paths onto the shared volume the worker pods mount, and back."""

from __future__ import annotations

from ctpipe.components.lib.kube.staging import plan_staging, stage_in, stage_out


def test_paths_outside_the_volume_are_mapped_and_others_kept(tmp_path):
    pvc = tmp_path / "pvc"
    command = ["/usr/bin/python3", "-m", "w", "--snapshot", "/kfp/in/snapshot", f"--ckpt={pvc}/already/there",
               "--tracking-uri", "http://mlflow:5000", "--out", "/kfp/in/snapshot"]
    staging = plan_staging(command, str(pvc), "ctpipe-train-x")
    assert staging.command[0] == "/usr/bin/python3"  # argv[0] is the launcher's business
    assert staging.command[4] == f"{pvc}/jobs/ctpipe-train-x/0-snapshot"
    assert staging.command[5] == f"--ckpt={pvc}/already/there"
    assert staging.command[7] == "http://mlflow:5000"
    assert staging.command[9] == staging.command[4]  # the same path maps to the same place
    assert staging.mapping == {"/kfp/in/snapshot": f"{pvc}/jobs/ctpipe-train-x/0-snapshot"}
    assert plan_staging(command, None, "j").command == command  # no shared volume: nothing to stage


def test_stage_in_merges_and_stage_out_copies_only_new_or_changed_files(tmp_path):
    snapshot = tmp_path / "step" / "snapshot"
    snapshot.mkdir(parents=True)
    (snapshot / "train.parquet").write_bytes(b"rows")
    ckpt = tmp_path / "step" / "ckpt"
    ckpt.mkdir()
    staging = plan_staging(["python", "--snapshot", str(snapshot), "--ckpt", str(ckpt)], str(tmp_path / "pvc"), "j")
    staged_ckpt = tmp_path / "pvc" / "jobs" / "j" / "1-ckpt"
    # A failed earlier attempt left checkpoints on the volume: staging in must keep them for the resume.
    (staged_ckpt / "step-2").mkdir(parents=True)
    (staged_ckpt / "step-2" / "shard-0").write_bytes(b"w0")
    stage_in(staging)
    assert (tmp_path / "pvc" / "jobs" / "j" / "0-snapshot" / "train.parquet").read_bytes() == b"rows"
    assert (staged_ckpt / "step-2" / "shard-0").read_bytes() == b"w0"
    (staged_ckpt / "index.json").write_text("{}")
    copied = stage_out(staging)
    assert sorted(copied) == sorted([str(ckpt / "index.json"), str(ckpt / "step-2" / "shard-0")])
    assert stage_out(staging) == []  # nothing changed since
