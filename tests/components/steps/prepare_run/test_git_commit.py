"""The code identity a run records (``ctpipe.git_commit``) is ctpipe's own checkout, wherever the run starts."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ctpipe.components.steps.prepare_run import prepare
from ctpipe.components.steps.prepare_run.prepare import git_commit

PACKAGE_ROOT = Path(prepare.__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def _other_repository(tmp_path: Path) -> Path:
    repo = tmp_path / "users-project"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "notes.txt").write_text("the user's own project\n")
    _git(repo, "add", "notes.txt")
    _git(repo, "-c", "user.name=u", "-c", "user.email=u@example.com", "commit", "-q", "-m", "theirs")
    return repo


def _checkout_head() -> str | None:
    out = subprocess.run(["git", "-C", str(PACKAGE_ROOT), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if out.returncode != 0 or Path(out.stdout.strip()).resolve() != PACKAGE_ROOT:
        return None
    return _git(PACKAGE_ROOT, "rev-parse", "HEAD")


def test_a_run_started_inside_another_repository_records_ctpipes_commit_not_that_one(tmp_path, monkeypatch):
    monkeypatch.delenv("CTPIPE_GIT_COMMIT", raising=False)
    other = _other_repository(tmp_path)
    monkeypatch.chdir(other)
    recorded = git_commit()
    assert _git(other, "rev-parse", "HEAD") not in recorded
    head = _checkout_head()
    if head is None:  # ctpipe installed from a wheel: no checkout to name
        assert recorded == ""
    else:
        assert recorded in (head, f"{head}-dirty")


def test_uncommitted_changes_to_tracked_files_mark_the_commit_dirty(tmp_path, monkeypatch):
    """A copy of a checkout with one tracked file changed: the commit it records says so."""
    monkeypatch.delenv("CTPIPE_GIT_COMMIT", raising=False)
    repo = tmp_path / "ctpipe-checkout"
    (repo / "components" / "steps" / "prepare_run").mkdir(parents=True)
    module = repo / "components" / "steps" / "prepare_run" / "prepare.py"
    shutil.copy(prepare.__file__, module)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=u", "-c", "user.email=u@example.com", "commit", "-q", "-m", "ctpipe")
    head = _git(repo, "rev-parse", "HEAD")
    monkeypatch.setattr(prepare, "__file__", str(module))
    assert git_commit() == head
    module.write_text(module.read_text() + "\n# an uncommitted change\n")
    assert git_commit() == f"{head}-dirty"


def test_an_image_baked_commit_wins(monkeypatch):
    monkeypatch.setenv("CTPIPE_GIT_COMMIT", "0123abcd")
    assert git_commit() == "0123abcd"
