"""The CLI's subcommands: each is a module of pipelines/cli/commands/, registered explicitly in ctpipe.pipelines.cli.main.COMMANDS."""

from __future__ import annotations

import argparse
import pkgutil
import subprocess
import sys

import pytest

import ctpipe.pipelines.cli.commands as commands
from ctpipe.pipelines.cli.main import COMMANDS, build_parser, main


def test_every_command_module_is_listed_once_and_nothing_else_registers_a_subcommand():
    modules = {info.name for info in pkgutil.iter_modules(commands.__path__)}
    listed = [module.__name__.rsplit(".", 1)[1] for module in COMMANDS]
    assert sorted(listed) == sorted(modules) and len(listed) == len(set(listed))
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == [
        "run", "config", "demo-data", "compile", "deploy", "gc", "models", "serve", "render-job", "submit", "suite", "train",
        "tune", "watch"
    ]  # fmt: skip


def test_each_command_module_registers_exactly_its_own_subcommand():
    for module in COMMANDS:
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers(dest="command")
        module.register(sub)
        assert list(sub.choices) == [module.__name__.rsplit(".", 1)[1].replace("_", "-")], module.__name__
        assert sub.choices[list(sub.choices)[0]].get_default("func") is module.run, module.__name__


def test_the_paths_the_help_texts_point_to_exist():
    """`ctpipe run --help` said 'sections as in components/lib/config.py', a module that had become the package
    components/lib/config/; a newcomer following the help found nothing there."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        for path in re.findall(r"\b((?:components|pipelines|examples|manifests)/[\w./-]*\w/?)", parser.format_help()):
            assert (root / path).exists(), f"ctpipe {name} --help names '{path}', which does not exist"


ENTRY_PROBE = """
import atexit, sys

class TornDown:
    def __del__(self):
        print("modules torn down", flush=True)

keep = TornDown()
atexit.register(lambda: print("exit handlers ran", flush=True))
sys.argv = ["ctpipe", "demo-data", "--out", sys.argv[1], "--days", sys.argv[2]]
from ctpipe.pipelines.cli.main import entry
entry()
"""


@pytest.mark.parametrize(("days", "code"), [("1", 0), ("0", 2)])
def test_the_ctpipe_script_runs_the_exit_handlers_then_exits_with_the_commands_code_without_teardown(
    tmp_path, days, code
):
    # Tearing down the modules of a run's CLI (KFP, protobuf, pandas) cost ~0.2 s at the end of every `ctpipe run`.
    proc = subprocess.run([sys.executable, "-c", ENTRY_PROBE, str(tmp_path / "data"), days],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == code, proc.stderr
    assert "exit handlers ran" in proc.stdout and "modules torn down" not in proc.stdout


def test_version_and_bare_ctpipe_exit_0(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"ctpipe {version('ctpipe')}"
    assert main([]) == 0  # before: a usage error (exit 2)
    out = capsys.readouterr().out
    assert out.startswith("usage: ctpipe") and "run" in out and "watch" in out


def test_every_subcommand_describes_itself_and_takes_quiet_and_verbose():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        assert parser.description, f"ctpipe {name} --help has no description"
        options = {s for a in parser._actions for s in a.option_strings}
        assert {"--quiet", "--verbose"} <= options, name
