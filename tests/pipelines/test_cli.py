"""The CLI's subcommands: each is a module of pipelines/commands/, registered explicitly in pipelines.cli.COMMANDS."""

from __future__ import annotations

import argparse
import pkgutil

import pipelines.commands as commands
from pipelines.cli import COMMANDS, build_parser


def test_every_command_module_is_listed_once_and_nothing_else_registers_a_subcommand():
    modules = {info.name for info in pkgutil.iter_modules(commands.__path__)}
    listed = [module.__name__.rsplit(".", 1)[1] for module in COMMANDS]
    assert sorted(listed) == sorted(modules) and len(listed) == len(set(listed))
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == [
        "run", "demo-data", "compile", "deploy", "models", "render-job", "submit", "suite", "train", "watch"
    ]  # fmt: skip


def test_each_command_module_registers_exactly_its_own_subcommand():
    for module in COMMANDS:
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers(dest="command")
        module.register(sub)
        assert list(sub.choices) == [module.__name__.rsplit(".", 1)[1].replace("_", "-")], module.__name__
        assert sub.choices[list(sub.choices)[0]].get_default("func") is module.run, module.__name__
