"""A standby interpreter runs one script as ``python -I -c`` would, with its libraries imported ahead and nothing
of ctpipe; a caller that finds none (or a used one) runs the script in a fresh interpreter instead."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ctpipe.components.lib.warm_start import running_server, standby

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    json.dump({"argv": sys.argv[1:], "cwd": os.getcwd(), "env": os.environ.get("SCRIPT_VALUE"),
               "preloaded": "email.mime.text" in sys.modules, "path": sys.path,
               "ctpipe": sorted(m for m in sys.modules if m.partition(".")[0] == "ctpipe"), "pid": os.getpid()},
              open(sys.argv[1], "w"))
    print("to stderr", file=sys.stderr)
    sys.exit(int(os.environ.get("SCRIPT_EXIT", "0")))
    """
)


def _wait_listening(path: Path, proc) -> None:
    deadline = time.monotonic() + 30
    while not path.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the standby did not listen"
        time.sleep(0.01)


@pytest.fixture
def waiting(tmp_path):
    socket_path = tmp_path / "standby.sock"
    proc = standby.start(str(socket_path), ("email.mime.text",), log_path=str(tmp_path / "standby.log"))
    _wait_listening(socket_path, proc)
    yield standby.Standby(str(socket_path), proc), proc
    proc.kill()
    proc.wait()


def _run(tmp_path, socket_path, name, **env):
    out, err = tmp_path / f"{name}.json", tmp_path / f"{name}.err"
    code, where = standby.run_script(SCRIPT, [str(out), "an argument"], cwd=str(tmp_path),
                                     env={**os.environ, **env}, stderr_path=str(err), timeout=120, standby=socket_path)
    return code, where, json.loads(out.read_text()), err.read_text()


def test_a_standby_runs_one_script_as_a_clean_python_would_and_then_is_gone(waiting, tmp_path):
    socket_path, proc = waiting
    code, where, seen, err = _run(tmp_path, socket_path, "first", SCRIPT_VALUE="from the caller", SCRIPT_EXIT="7")
    assert (code, where) == (7, "a warm standby interpreter")
    assert seen["pid"] == proc.pid and seen["preloaded"]
    assert seen["argv"][1] == "an argument" and seen["cwd"] == str(tmp_path) and seen["env"] == "from the caller"
    assert seen["ctpipe"] == []  # nothing of ctpipe in it, though the caller imports ctpipe
    assert str(Path(standby.__file__).parent) not in seen["path"]  # run as a file under -I: its folder is not on the path
    assert "to stderr" in err
    assert proc.wait(timeout=30) == 7  # one request, then it exits

    # Used: the next caller runs the script in a fresh interpreter.
    code, where, seen, _ = _run(tmp_path, socket_path, "second")
    assert (code, where) == (0, "a fresh interpreter") and seen["pid"] != proc.pid and not seen["preloaded"]


def test_an_uncaught_exception_is_printed_and_exits_1(waiting, tmp_path):
    socket_path, _ = waiting
    err = tmp_path / "err.txt"
    code, where = standby.run_script("raise RuntimeError('on purpose')", [], cwd=str(tmp_path), env=dict(os.environ),
                                     stderr_path=str(err), timeout=60, standby=socket_path)
    assert (code, where) == (1, "a warm standby interpreter")
    assert "RuntimeError: on purpose" in err.read_text()


def test_a_standby_that_dies_running_the_script_fails_it_and_says_so_in_its_stderr(waiting, tmp_path):
    socket_path, _ = waiting
    err = tmp_path / "err.txt"
    script = "import os, sys; print('dying', file=sys.stderr, flush=True); os._exit(9)"
    code, _ = standby.run_script(script, [], cwd=str(tmp_path), env=dict(os.environ), stderr_path=str(err),
                                 timeout=60, standby=socket_path)
    assert code == 1 and "dying" in err.read_text()


def test_a_run_s_warm_start_server_starts_a_standby_once_its_own_imports_are_done(tmp_path):
    with running_server(preload=("email.mime.text",), with_standby=True) as warm:
        assert warm is not None
        run_s = standby.Standby(os.environ[standby.STANDBY_ENV])
        deadline = time.monotonic() + 60
        while not run_s.reserve():  # started after the server's imports, then importing its own (at low priority)
            assert time.monotonic() < deadline, "the server started no standby, or it never got ready"
            time.sleep(0.05)
        code, where, seen, _ = _run(tmp_path, run_s, "run")
        assert (code, where) == (0, "a warm standby interpreter") and seen["ctpipe"] == []
    assert standby.STANDBY_ENV not in os.environ


def test_the_run_s_standby_still_importing_is_not_waited_for(tmp_path):
    """A standby started early at the lowest priority may still be importing when the check is due (a loaded
    machine): the caller does not wait on it, it runs the script another way (here: fresh)."""
    socket_path = tmp_path / "slow.sock"
    proc = standby.start(str(socket_path), ("torch", "mlflow.pyfunc"), idle=True)
    try:
        _wait_listening(socket_path, proc)
        run_s = standby.Standby(str(socket_path))  # not the caller's own: taken only when ready
        code, where, seen, _ = _run(tmp_path, run_s, "busy")
        assert (code, where) == (0, "a fresh interpreter") and not seen["preloaded"]
        assert proc.poll() is None  # still there for a later caller
        assert standby.Standby(str(socket_path), proc).reserve(timeout=120)  # and it gets ready for one
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread priorities read from /proc")
def test_an_idle_standby_imports_at_the_lowest_priority(tmp_path):
    """The run's standby imports on the cores the steps leave idle: its importing thread runs at nice 19."""
    socket_path = tmp_path / "idle.sock"
    proc = standby.start(str(socket_path), ("torch", "mlflow.pyfunc"), idle=True)
    try:
        _wait_listening(socket_path, proc)
        nice, deadline = set(), time.monotonic() + 30
        while 19 not in nice and time.monotonic() < deadline:
            nice = set()
            for stat in Path(f"/proc/{proc.pid}/task").glob("*/stat"):
                try:  # field 19 (nice), counted after the command name's closing parenthesis
                    nice.add(int(stat.read_text().rpartition(")")[2].split()[16]))
                except (OSError, IndexError, ValueError):
                    pass
            time.sleep(0.02)
        assert 19 in nice and min(nice) < 19  # the importer is nice 19; the thread that will run the request is not
    finally:
        proc.kill()
        proc.wait()


def test_without_a_standby_the_script_runs_fresh(tmp_path):
    code, where, seen, _ = _run(tmp_path, standby.Standby(str(tmp_path / "no-such.sock")), "fresh")
    assert (code, where) == (0, "a fresh interpreter") and seen["ctpipe"] == [] and sys.executable
