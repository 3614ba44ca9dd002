"""A checkpoint's digests come from its bytes as they are written, and cover exactly the files of that save."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from torch import nn

from ctpipe.components.engine import checkpointing as ckpt


def _model_and_optimizer():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(5, 3)).sum().backward()
    opt.step()
    return model, opt


def _recorded(path):
    return json.loads((path / ckpt.DIGESTS_FILE).read_text())


def test_a_save_hashes_its_files_as_it_writes_them_without_reading_them_back(tmp_path, monkeypatch):
    """Before: once every rank had written, rank 0 read every file of the checkpoint again to hash it (a second
    pass over the bytes, inside the training loop's save)."""
    model, opt = _model_and_optimizer()

    def read_back(*args, **kwargs):
        raise AssertionError("a checkpoint file was read back to hash it")

    monkeypatch.setattr(hashlib, "file_digest", read_back)
    path = ckpt.save_checkpoint(tmp_path, 1, model=model, optimizer=opt, rank_state={"rng": torch.ones(2)},
                                meta={"step": 1}, rank=0)
    monkeypatch.undo()
    assert ckpt.is_complete(path)
    assert _recorded(path) == ckpt.file_digests(path)  # the same digests a read of the files gives
    assert {".metadata", "meta.json", "rank0.pt"} <= set(_recorded(path))
    assert ckpt.checkpoint_damage(path) is None
    fresh = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    _, rank_state = ckpt.load_checkpoint(path, model=fresh, optimizer=torch.optim.AdamW(fresh.parameters()), rank=0)
    assert torch.equal(rank_state["rng"], torch.ones(2))
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in model.state_dict().items())


def test_a_resave_removes_what_an_earlier_partial_save_of_the_step_left_and_this_one_did_not_write(tmp_path):
    """Files of an earlier attempt at the step (here one of a larger world size, killed before its marker) are not
    the checkpoint's: they are removed, so every file of a marked checkpoint has a recorded digest."""
    model, opt = _model_and_optimizer()
    step_dir = ckpt.checkpoint_path(tmp_path, 2)
    step_dir.mkdir(parents=True)
    (step_dir / "__3_0.distcp").write_bytes(b"shard of rank 3")
    (step_dir / "rank3.pt").write_bytes(b"state of rank 3")
    path = ckpt.save_checkpoint(tmp_path, 2, model=model, optimizer=opt, rank_state={}, meta={"step": 2}, rank=0)
    assert not (path / "__3_0.distcp").exists() and not (path / "rank3.pt").exists()
    assert _recorded(path) == ckpt.file_digests(path)


def test_a_file_written_out_of_order_is_hashed_from_disk(tmp_path):
    """A writer that seeks makes the running hash wrong: that file's digest is taken from its bytes on disk."""
    fs = ckpt._DigestingFileSystem()
    with fs.create_stream(tmp_path / "patched.bin", "wb") as stream:
        stream.write(b"header-placeholder")
        stream.seek(0)
        stream.write(b"HEADER")
    with fs.create_stream(tmp_path / "plain.bin", "wb") as stream:
        stream.write(b"plain")
    assert fs.digests["patched.bin"] is None
    assert fs.digests["plain.bin"] == hashlib.sha256(b"plain").hexdigest()
    ckpt._finish_digests(tmp_path, dict(fs.digests))
    assert _recorded(tmp_path) == ckpt.file_digests(tmp_path)


@pytest.mark.parametrize("flip", [".metadata", "rank0.pt", "meta.json"])
def test_bytes_changed_after_the_save_are_reported_damaged(tmp_path, flip):
    model, opt = _model_and_optimizer()
    path = ckpt.save_checkpoint(tmp_path, 1, model=model, optimizer=opt, rank_state={}, meta={"step": 1}, rank=0)
    target = path / flip
    target.write_bytes(target.read_bytes() + b" ")
    assert ckpt.checkpoint_damage(path) == f"{flip} does not match its SHA-256"
