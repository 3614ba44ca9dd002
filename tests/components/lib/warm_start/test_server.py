"""A process started through the warm-start server behaves as ``python`` would, and saves only time.

Each test starts a real server (with a small preload list) and real clients; the processes are the
ones a local run starts: ``python -m module args`` with their own environment, directory and streams.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ctpipe.components.lib.warm_start import SOCKET_ENV, client_prefix, running_server, warm_command
from tests.fixtures.processes import gone_within

PROBE = textwrap.dedent(
    """
    import gc, json, os, signal, sys
    import ctpipe.components.lib.warm_start.server as server
    print(json.dumps({
        "argv": sys.argv[1:],
        "cwd": os.getcwd(),
        "env": os.environ.get("PROBE_VALUE"),
        "warm": server.IN_CHILD,
        "preloaded": "email.mime.text" in sys.modules,
        "pid": os.getpid(),
        "gc": gc.isenabled(),
        "threads": sys.modules["torch"].get_num_threads() if "torch" in sys.modules else None,
        "ignored": [n for n in ("SIGINT", "SIGTERM", "SIGHUP") if signal.getsignal(getattr(signal, n)) == signal.SIG_IGN],
    }), flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    mode = os.environ.get("PROBE_MODE", "")
    if mode == "wait_for_sigterm":
        import signal, time
        def stop(signum, frame):
            print("got SIGTERM", flush=True)
            sys.exit(3)
        signal.signal(signal.SIGTERM, stop)
        print("ready", flush=True)
        time.sleep(60)
    if mode == "sleep":
        import time
        time.sleep(60)
    if mode == "ignore_sigterm":
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", flush=True)
        time.sleep(60)
    if mode == "raise":
        raise RuntimeError("the probe failed on purpose")
    if mode == "kill_self":
        import signal
        os.kill(os.getpid(), signal.SIGKILL)
    sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
    """
)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "probe_module.py").write_text(PROBE)
    return tmp_path


@pytest.fixture
def server():
    with running_server(preload=("email.mime.text", "ctpipe.components.lib.warm_start.server")) as warm:
        assert warm is not None
        yield warm


def _start(workdir: Path, *args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        warm_command([sys.executable, "-m", "probe_module", *args]),
        cwd=workdir,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _probe_output(proc: subprocess.Popen, timeout: float = 60) -> tuple[int, dict, str]:
    import json

    out, err = proc.communicate(timeout=timeout)
    first = out.splitlines()[0] if out else "{}"
    return proc.returncode, json.loads(first), err


def test_a_module_runs_in_a_forked_child_with_the_callers_arguments_environment_directory_and_streams(server, workdir):
    proc = _start(workdir, "--flag", "value with spaces", PROBE_VALUE="from the caller", PROBE_EXIT="7")
    code, seen, err = _probe_output(proc)
    assert proc.args[: len(client_prefix())] == client_prefix()  # it went through the client
    assert code == 7
    assert seen["argv"] == ["--flag", "value with spaces"]
    assert seen["cwd"] == str(workdir)  # `-m` found the module in the caller's directory, as python does
    assert seen["env"] == "from the caller"
    assert seen["warm"] is True and seen["preloaded"] is True
    assert seen["gc"] is True  # the server preloads with the collector off; the child has it back
    assert "to stderr" in err


def test_an_uncaught_exception_is_printed_and_exits_1_as_python_would(server, workdir):
    code, _, err = _probe_output(_start(workdir, PROBE_MODE="raise"))
    assert code == 1
    assert "RuntimeError: the probe failed on purpose" in err and "Traceback" in err


def test_a_child_killed_by_a_signal_looks_killed_to_the_caller(server, workdir):
    code, seen, _ = _probe_output(_start(workdir, PROBE_MODE="kill_self"))
    assert seen["warm"] is True
    assert code == -signal.SIGKILL, _


def _wait_for_line(proc: subprocess.Popen, text: str) -> list[str]:
    lines = []
    while True:
        line = proc.stdout.readline()
        assert line, f"the process ended before printing {text!r}: {lines}"
        lines.append(line)
        if text in line:
            return lines


def test_sigterm_to_the_caller_reaches_the_child(server, workdir):
    proc = _start(workdir, PROBE_MODE="wait_for_sigterm")
    _wait_for_line(proc, "ready")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert "got SIGTERM" in out
    assert proc.returncode == 3


def _ignoring(*signals: int):
    # The caller ignores exactly ``signals``: the others are reset, so a test run under nohup or `&` (which
    # ignore SIGHUP, SIGINT) sees the same as one from a terminal.
    def preexec() -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN if sig in signals else signal.SIG_DFL)

    return preexec


@pytest.mark.parametrize("ignored", [(signal.SIGINT,), (signal.SIGINT, signal.SIGTERM), ()])
def test_signals_the_caller_ignores_are_ignored_by_the_child_as_by_a_cold_python(server, workdir, ignored):
    # `ctpipe run &` from a script ignores SIGINT, and so does every cold step it starts; before, a forked
    # step had Python's KeyboardInterrupt handler, so a Ctrl-C meant for the script stopped the run.
    proc = subprocess.Popen(
        warm_command([sys.executable, "-m", "probe_module"]),
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ignoring(*ignored),
    )
    code, seen, err = _probe_output(proc)
    assert code == 0 and seen["warm"] is True, err
    assert seen["ignored"] == [sig.name for sig in ignored]


def test_a_killed_caller_takes_its_child_with_it(server, workdir):
    import json

    proc = _start(workdir, PROBE_MODE="sleep")
    child_pid = json.loads(proc.stdout.readline())["pid"]
    assert child_pid != proc.pid
    proc.kill()
    proc.wait(timeout=10)
    assert gone_within(child_pid), "the forked child outlived its caller"


def test_the_server_stops_its_children_when_the_run_ends(workdir):
    import json

    with running_server(preload=("ctpipe.components.lib.warm_start.server",)):
        proc = _start(workdir, PROBE_MODE="sleep")
        child_pid = json.loads(proc.stdout.readline())["pid"]
    assert gone_within(child_pid)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGTERM  # stopped (SIGTERM first), and its caller told so
    assert SOCKET_ENV not in os.environ


def test_without_a_server_the_process_starts_cold(workdir, monkeypatch):
    monkeypatch.setenv(SOCKET_ENV, str(workdir / "no-such.sock"))
    proc = _start(workdir, PROBE_VALUE="cold", PROBE_EXIT="5")
    code, seen, _ = _probe_output(proc)
    assert proc.args[: len(client_prefix())] == client_prefix()
    assert code == 5 and seen["env"] == "cold" and seen["warm"] is False


def test_warm_start_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("CTPIPE_WARM_START", "0")
    with running_server() as warm:
        assert warm is None
        assert SOCKET_ENV not in os.environ
        assert warm_command([sys.executable, "-m", "x"]) == [sys.executable, "-m", "x"]


def test_a_module_that_cannot_be_preloaded_is_named_in_the_log_and_processes_still_start(workdir):
    with running_server(preload=("no_such_module_for_ctpipe", "ctpipe.components.lib.warm_start.server")) as warm:
        code, seen, _ = _probe_output(_start(workdir, PROBE_EXIT="0"))
        assert code == 0 and seen["warm"] is True
        deadline = time.monotonic() + 10
        while "no_such_module_for_ctpipe" not in warm.log_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "did not preload no_such_module_for_ctpipe: ModuleNotFoundError" in warm.log_text()


def test_the_callers_thread_count_reaches_a_preloaded_torch(workdir):
    with running_server(preload=("torch", "ctpipe.components.lib.warm_start.server")):
        code, seen, _ = _probe_output(_start(workdir, OMP_NUM_THREADS="1"))
        assert code == 0 and seen["warm"] is True and seen["threads"] == 1


def test_a_child_that_ignores_sigterm_is_killed_when_the_run_ends(workdir):
    with running_server(preload=("ctpipe.components.lib.warm_start.server",)):
        proc = _start(workdir, PROBE_MODE="ignore_sigterm")
        _wait_for_line(proc, "ready")
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL


def test_a_warm_start_setting_that_is_not_a_switch_is_a_clear_error(monkeypatch):
    from ctpipe.components.lib.errors import ConfigError

    monkeypatch.setenv("CTPIPE_WARM_START", "fasle")
    with pytest.raises(ConfigError, match=r"CTPIPE_WARM_START='fasle' is not a switch; allowed: 1/true/yes/on"):
        with running_server():
            pass


GATED_MODULE = """
import os, time
while not os.path.exists({release!r}):
    time.sleep(0.02)
"""


def _gated(workdir: Path, name: str) -> Path:
    """A module whose import blocks until the returned path exists (a long import the test controls)."""
    release = workdir / f"release-{name}"
    (workdir / f"{name}.py").write_text(GATED_MODULE.format(release=str(release)))
    return release


def _wait_until_connected(proc: subprocess.Popen, seconds: float = 20) -> None:
    """Until the client holds a socket (it connects right after creating it; the server's backlog takes it)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for fd in Path(f"/proc/{proc.pid}/fd").iterdir():
            try:
                if os.readlink(fd).startswith("socket:"):
                    time.sleep(0.2)
                    return
            except OSError:
                continue
        time.sleep(0.02)
    raise AssertionError("the client never connected")


NEEDS_PROBE = """
import json, os
import needed_lib

if __name__ == "__main__":
    print(json.dumps({"imported_by_the_server": needed_lib.IMPORTED_IN != os.getpid()}), flush=True)
"""


def test_a_process_whose_module_is_still_to_be_preloaded_waits_for_it_instead_of_importing_it_again(workdir, monkeypatch):
    # `-m needs_probe` with needs_probe in the preload list: forked before the server has it, the child would
    # import it (and needed_lib) itself, beside the server importing the same: the same seconds twice.
    (workdir / "needed_lib.py").write_text("import os\nIMPORTED_IN = os.getpid()\n")
    (workdir / "needs_probe.py").write_text(NEEDS_PROBE)
    gate = _gated(workdir, "gate_lib")
    monkeypatch.setenv("PYTHONPATH", str(workdir))
    with running_server(preload=("gate_lib", "needs_probe", "ctpipe.components.lib.warm_start.server")):
        proc = subprocess.Popen(warm_command([sys.executable, "-m", "needs_probe"]), cwd=workdir,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait_until_connected(proc)
        gate.touch()  # the server takes the request after this import, before needs_probe's
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert '"imported_by_the_server": true' in out, out + err


def test_a_waiting_process_has_its_module_imported_next_ahead_of_the_rest(workdir, monkeypatch):
    """A cached rerun goes on at evaluate: its module comes before the validation and training libraries still
    to be preloaded (here blocking_lib, which would block until released), not after them."""
    (workdir / "needed_lib.py").write_text("import os\nIMPORTED_IN = os.getpid()\n")
    (workdir / "needs_probe.py").write_text(NEEDS_PROBE)
    gate, blocker = _gated(workdir, "gate_lib"), _gated(workdir, "blocking_lib")
    monkeypatch.setenv("PYTHONPATH", str(workdir))
    with running_server(preload=("gate_lib", "blocking_lib", "needs_probe", "ctpipe.components.lib.warm_start.server")):
        try:
            proc = subprocess.Popen(warm_command([sys.executable, "-m", "needs_probe"]), cwd=workdir,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            _wait_until_connected(proc)
            gate.touch()
            out, err = proc.communicate(timeout=30)
            assert proc.returncode == 0, err
            assert '"imported_by_the_server": true' in out, out + err
            assert not blocker.exists()  # served while blocking_lib was still to be imported
        finally:
            blocker.touch()


def test_the_caller_gets_the_exit_code_while_the_server_is_inside_a_long_import(workdir, monkeypatch):
    gate, blocker = _gated(workdir, "gate_lib"), _gated(workdir, "blocking_lib")
    monkeypatch.setenv("PYTHONPATH", str(workdir))
    with running_server(preload=("gate_lib", "blocking_lib", "ctpipe.components.lib.warm_start.server")):
        try:
            proc = _start(workdir, PROBE_EXIT="7")
            _wait_until_connected(proc)
            gate.touch()  # the server forks the probe, then blocks in blocking_lib until released
            code, seen, err = _probe_output(proc, timeout=30)
            assert code == 7 and seen["warm"] is True, err
            assert not blocker.exists()
        finally:
            blocker.touch()


def test_every_pipeline_step_waits_for_a_module_the_server_preloads():
    from ctpipe.components.lib.warm_start.server import PRELOAD, needed_module
    from ctpipe.pipelines.continuous_training import build_pipeline

    executors = build_pipeline(None).pipeline_spec.deployment_spec["executors"]
    steps = {}
    for executor in executors.values():
        args = list(executor["container"]["args"])
        steps[args[args.index("--function_to_execute") + 1]] = needed_module(["-m", "kfp.dsl.executor_main", *args])
    assert len(steps) == 7 and all(module in PRELOAD for module in steps.values()), steps
    assert needed_module(["-m", "ctpipe.components.steps.train.worker", "--snapshot", "s"]) in PRELOAD  # the ranks


def _imported_after_the_preloads(argv: list[str], probe: str, prefixes: tuple[str, ...]) -> list[str]:
    """The modules under ``prefixes`` that ``probe`` still imports in a fresh interpreter that first imported what
    the server preloads before forking the process of ``argv`` (each of them preloaded at all, checked too)."""
    code = f"""
import importlib, json, sys
from ctpipe.components.lib.warm_start.server import PRELOAD, needed_modules
needs = needed_modules({argv!r})
assert needs and all(module in PRELOAD for module in needs), needs
for module in needs:
    importlib.import_module(module)
before = set(sys.modules)
{probe}
print(json.dumps(sorted(m for m in set(sys.modules) - before if m.startswith({prefixes!r}))))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("step", ["prepare_run", "validate_data", "sanity_checks", "train", "select_checkpoint",
                                  "evaluate", "register"])
def test_a_pipeline_step_is_forked_after_kfps_executor_whatever_the_preload_order(step):
    # Every step runs as `python -m kfp.dsl.executor_main`. A step's request moves its own module ahead of the rest
    # of the list: with MLflow first in it (the store builder's part), prepare_run was forked before the server
    # reached KFP's executor and imported KFP itself, beside the server importing it again.
    argv = ["-m", "kfp.dsl.executor_main", "--function_to_execute", step]
    assert _imported_after_the_preloads(argv, "import kfp.dsl.executor", ("kfp",)) == []


@pytest.mark.parametrize("argv", [
    ["-m", "kfp.dsl.executor_main", "--function_to_execute", "sanity_checks"],
    ["-m", "ctpipe.components.steps.train.worker", "--snapshot", "s"],
])
def test_a_step_that_builds_an_optimizer_is_forked_after_what_the_optimizer_imports(argv):
    # AdamW imports torch._dynamo (and sympy) the first time one is built: forked before the server preloaded
    # it, each such step imported it again itself (the profile's 4 % of a first run).
    probe = """
import torch
from ctpipe.components.engine.step import build_optimizer
from ctpipe.components.lib.config import TrainConfig
build_optimizer(torch.nn.Linear(2, 2), TrainConfig())
"""
    assert _imported_after_the_preloads(argv, probe, ("torch._dynamo", "sympy")) == []


def test_a_process_that_opens_the_mlflow_store_is_forked_after_mlflows_sql_store(tmp_path):
    # prepare_run's module imports MLflow only when the step opens the store: a prepare request that came
    # before the server reached MLflow's SQL store had the step moved ahead of it and import it itself
    # (1.5 s of a loaded first run's prepare_run), beside the server importing it again.
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    from ctpipe.components.lib.tracking.sqlite_store import ensure_store

    ensure_store(uri)  # the build's own imports (alembic's migrations) are not what this is about
    probe = f"""
from ctpipe.components.lib.tracking import ensure_experiment
ensure_experiment({uri!r}, "probe")
"""
    argv = ["-m", "kfp.dsl.executor_main", "--function_to_execute", "prepare_run"]
    assert _imported_after_the_preloads(argv, probe, ("mlflow.store.tracking",)) == []


def test_kfp_is_preloaded_as_a_steps_executor_imports_it_without_the_client_or_the_compiler(workdir):
    # A step runs as `_KFP_RUNTIME=true python -m kfp.dsl.executor_main` (KFP's own command): KFP then skips its
    # API client and the DSL's compile-time parts. The server imported the whole of KFP (0.4 s quiet, 0.9 s
    # loaded) ahead of the first step, for steps that never use it.
    (workdir / "kfp_probe.py").write_text(
        "import json, os, sys\n"
        "from kfp.dsl import executor_main\n"
        "print(json.dumps({'client': 'kfp.client' in sys.modules, 'compiler': 'kfp.dsl.component_decorator' in sys.modules,"
        " 'preloaded': 'kfp.dsl.executor' in sys.modules, 'runtime': os.environ.get('_KFP_RUNTIME')}))\n"
    )
    with running_server(preload=("kfp.dsl.executor", "ctpipe.components.lib.warm_start.server")) as warm:
        assert warm is not None
        proc = subprocess.run(warm_command([sys.executable, "-m", "kfp_probe"]), cwd=workdir, capture_output=True,
                              text=True, timeout=120, env={**os.environ, "_KFP_RUNTIME": "true"})
    assert proc.returncode == 0, proc.stderr
    import json

    assert json.loads(proc.stdout) == {"client": False, "compiler": False, "preloaded": True, "runtime": "true"}
