"""`ctpipe run` starts its warm-start server as the process begins, before the CLI imports its commands, and the
run takes that server; no other command starts one, and a server nobody takes ends with the process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

import ctpipe.components.lib.warm_start as warm_start
from ctpipe.components.lib.warm_start import SOCKET_ENV, WARM_START_ENV, running_server, start_early
from tests.fixtures.processes import gone_within

REPO = Path(__file__).resolve().parents[4]


@pytest.fixture(autouse=True)
def _no_early_server_left():
    yield
    warm_start._stop_early()


def test_the_run_takes_the_server_started_early_and_stops_it_with_the_block(monkeypatch):
    monkeypatch.delenv(SOCKET_ENV, raising=False)
    monkeypatch.delenv(WARM_START_ENV, raising=False)
    start_early(["run", "--home", "h"])
    early = warm_start._EARLY
    assert early is not None and early.process.poll() is None
    tmp = Path(early.tmp.name)
    with running_server(with_standby=True) as warm:
        assert warm is not None and warm.pid == early.process.pid
        assert os.environ[SOCKET_ENV] == warm.socket_path and Path(warm.socket_path).parent == tmp
        assert warm_start._EARLY is None  # taken: a second block would start its own
    assert gone_within(early.process.pid) and not tmp.exists()


def test_a_block_with_its_own_preload_list_starts_its_own_server(monkeypatch):
    monkeypatch.delenv(SOCKET_ENV, raising=False)
    monkeypatch.delenv(WARM_START_ENV, raising=False)
    start_early(["run"])
    early = warm_start._EARLY
    with running_server(preload=("json",)) as warm:
        assert warm is not None and warm.pid != early.process.pid
    assert warm_start._EARLY is early and early.process.poll() is None  # still there for the run's own block


@pytest.mark.parametrize("argv", [
    ["models", "list"],
    ["run", "--runner", "container"],
    ["run", "--runner=container", "--image", "x"],
    ["run", "--help"],
    ["watch", "run"],
    [],
])
def test_no_server_for_another_command_the_container_runner_or_help(argv, monkeypatch):
    monkeypatch.delenv(SOCKET_ENV, raising=False)
    monkeypatch.delenv(WARM_START_ENV, raising=False)
    start_early(argv)
    assert warm_start._EARLY is None


@pytest.mark.parametrize(("name", "value"), [(WARM_START_ENV, "0"), (WARM_START_ENV, "maybe"), (SOCKET_ENV, "/x/s")])
def test_no_server_with_warm_start_off_or_inside_a_server(name, value, monkeypatch):
    # An invalid switch is running_server's to refuse, with its message; a step already forked from a server
    # does not start another.
    monkeypatch.delenv(SOCKET_ENV, raising=False)
    monkeypatch.setenv(name, value)
    start_early(["run"])
    assert warm_start._EARLY is None


ENTRY_PROBE = textwrap.dedent(
    """
    import json, sys
    import ctpipe.components.lib.warm_start as warm_start

    real = warm_start.start_early
    seen = {}

    def spy(argv):
        real(argv)
        early = warm_start._EARLY
        seen.update(cli_imported="ctpipe.pipelines.cli.main" in sys.modules, started=early is not None,
                    pid=early and early.process.pid, tmp=early and early.tmp.name)
        print(json.dumps(seen), flush=True)

    warm_start.start_early = spy
    sys.argv = ["ctpipe", "run", "--no-such-option"]
    from ctpipe.pipelines.cli.entry import entry
    entry()
    """
)


def test_the_console_script_starts_the_server_before_the_cli_and_a_server_not_taken_ends_with_it():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["ctpipe"] == "ctpipe.pipelines.cli.entry:entry"
    env = {k: v for k, v in os.environ.items() if k not in (SOCKET_ENV, WARM_START_ENV)}
    proc = subprocess.run([sys.executable, "-c", ENTRY_PROBE], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2 and "--no-such-option" in proc.stderr, proc.stderr  # argparse's usage error
    seen = json.loads(proc.stdout.splitlines()[0])
    assert seen["started"] and not seen["cli_imported"]
    assert gone_within(seen["pid"]) and not Path(seen["tmp"]).exists()
