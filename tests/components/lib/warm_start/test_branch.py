"""The warm-start server's branch (components/lib/warm_start/branch.py): torch's side of the preload list imported by
a second process while the server imports GX, and the requests that need it forked there.

The server's list here is a small copy of the real one: a common part (``email.mime.text``), then
``great_expectations`` (a stand-in on PYTHONPATH whose import blocks until the test releases it: the server's side),
then ``torch``, ``branch_lib`` and ``branch_probe`` (the branch's side)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctpipe.components.lib.warm_start import running_server, warm_command
from tests.fixtures.processes import gone_within

BLOCKING_GX = """
import os, time
while not os.path.exists({release!r}):
    time.sleep(0.02)
"""
# Imported by the process that preloads it (the marker says when); branch_probe, run, reports where it runs.
BRANCH_LIB = """
import os
IMPORTED_IN = os.getpid()
open({marker!r}, "a").close()
"""
BRANCH_PROBE = """
import json, os, sys
import branch_lib

if __name__ == "__main__":
    print(json.dumps({"preloaded_by_parent": branch_lib.IMPORTED_IN == os.getppid(), "parent": os.getppid(),
                      "has_gx": "great_expectations" in sys.modules}), flush=True)
    if os.environ.get("PROBE_SLEEP"):
        print("ready", flush=True)
        import time
        time.sleep(60)
    sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
"""
SERVER_SIDE_PROBE = """
import json, os, sys
print(json.dumps({"parent": os.getppid(), "has_gx": "great_expectations" in sys.modules}), flush=True)
"""
PRELOAD = ("email.mime.text", "great_expectations", "torch", "branch_lib", "branch_probe")


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "great_expectations.py").write_text(BLOCKING_GX.format(release=str(tmp_path / "release-gx")))
    (tmp_path / "branch_lib.py").write_text(BRANCH_LIB.format(marker=str(tmp_path / "branch-probe-imported")))
    (tmp_path / "branch_probe.py").write_text(BRANCH_PROBE)
    (tmp_path / "server_side_probe.py").write_text(SERVER_SIDE_PROBE)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return tmp_path


def _run(workdir: Path, module: str, **env: str) -> tuple[int, dict, str]:
    proc = subprocess.run(warm_command([sys.executable, "-m", module]), cwd=workdir, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, json.loads(proc.stdout.splitlines()[0]) if proc.stdout else {}, proc.stderr


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _wait_for(path: Path, seconds: float = 90) -> bool:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return path.exists()


def test_torchs_side_is_imported_while_the_server_is_still_inside_gx(workdir):
    """Before: one process imported the list in order, so torch (and every step that trains) waited for GX: the
    sanity step started ~1 s after validation ended, with a core idle."""
    with running_server(preload=PRELOAD) as warm:
        try:
            assert _wait_for(workdir / "branch-probe-imported"), "the branch's side was not imported during GX's"
            assert not (workdir / "release-gx").exists()
        finally:
            (workdir / "release-gx").touch()
        assert warm is not None and len(_children(warm.pid)) == 1  # the branch, and no other child yet


def test_a_request_for_the_branchs_side_is_forked_there_and_the_rest_by_the_server(workdir):
    (workdir / "release-gx").touch()
    with running_server(preload=PRELOAD) as warm:
        assert _wait_for(workdir / "branch-probe-imported")
        (branch,) = _children(warm.pid)
        code, seen, err = _run(workdir, "branch_probe", PROBE_EXIT="7")
        assert code == 7, err
        assert seen == {"preloaded_by_parent": True, "parent": branch, "has_gx": False}
        code, seen, err = _run(workdir, "server_side_probe")
        assert code == 0 and seen == {"parent": warm.pid, "has_gx": True}, err


def test_without_its_branch_the_server_still_starts_every_request(workdir):
    (workdir / "release-gx").touch()
    with running_server(preload=PRELOAD) as warm:
        assert _wait_for(workdir / "branch-probe-imported")
        (branch,) = _children(warm.pid)
        os.kill(branch, signal.SIGKILL)
        assert gone_within(branch)
        code, seen, err = _run(workdir, "branch_probe", PROBE_EXIT="3")
        # Forked by the server, which left those modules to the branch: the child imports them itself.
        assert code == 3 and seen["parent"] == warm.pid and seen["preloaded_by_parent"] is False, err


def test_the_branch_and_its_children_end_with_the_run(workdir):
    (workdir / "release-gx").touch()
    with running_server(preload=PRELOAD) as warm:
        assert _wait_for(workdir / "branch-probe-imported")
        (branch,) = _children(warm.pid)
        proc = subprocess.Popen(warm_command([sys.executable, "-m", "branch_probe"]), cwd=workdir,
                                env={**os.environ, "PROBE_SLEEP": "1"}, stdout=subprocess.PIPE, text=True)
        assert json.loads(proc.stdout.readline())["parent"] == branch and proc.stdout.readline() == "ready\n"
        (child,) = _children(branch)
    assert gone_within(branch) and gone_within(child)
    assert proc.wait(timeout=30) != 0  # its process was stopped with the run, as the server's children are
