"""`ctpipe suite`: profile, fetch and check the Great Expectations suite that gates the data.

    ctpipe suite profile --data DIR --out suites/my_data.json [--config FILE] [--set KEY=VALUE ...]
    ctpipe suite champion --out suites/my_data.json [--home DIR | --tracking-uri URI]
    ctpipe suite check --data DIR [--suite FILE] [--out DIR] [--config FILE] [--set KEY=VALUE ...]

Review the profiled (or the champion's) suite, edit ranges, sets and severities (``critical`` fails the
run, ``warning`` is recorded on the model), commit it, and point runs at it with
``--set validation.suite_path=suites/my_data.json``. ``check`` runs the validation step alone.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.pipelines.cli.commands import add_config_args, existing_registry_uri


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "suite", help="profile, fetch or check the data validation suite", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="suite_command", required=True, metavar="ACTION")
    profile = sub.add_parser("profile", help="profile a suite from the train split of DATA")
    profile.add_argument("--data", required=True, help="data root (local path or fsspec URL)")
    profile.add_argument("--out", required=True, help="where to write the suite JSON")
    add_config_args(profile)
    champion = sub.add_parser("champion", help="download the suite stored with the champion model")
    champion.add_argument("--out", required=True, help="where to write the suite JSON")
    champion.add_argument("--home", metavar="DIR", help="ctpipe home with mlflow.db (default $CTPIPE_HOME or ./.ctpipe)")
    champion.add_argument("--tracking-uri", metavar="URI",
                          help="MLflow tracking URI (default registry.tracking_uri, else the --home's SQLite)")
    add_config_args(champion)
    check = sub.add_parser("check", help="run the validation step alone and write its reports")
    check.add_argument("--data", required=True, help="data root (local path or fsspec URL)")
    check.add_argument("--suite", help="suite JSON (default: validation.suite_path, else profile from DATA)")
    check.add_argument("--out", default="validation-out", help="directory for the snapshot and reports")
    add_config_args(check)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ctpipe.components.run_config import resolve_config

    config = resolve_config(file=args.config, settings=args.overrides)
    if args.suite_command == "profile":
        from ctpipe.pipelines.local.validate_alone import profile_suite

        suite = profile_suite(args.data, config)
        _write(args.out, suite)
        print(f"{len(suite['expectations'])} expectations profiled from {args.data}; review, commit, then run with "
              f"--set validation.suite_path={args.out}")
        print(args.out)
        return 0
    if args.suite_command == "champion":
        from ctpipe.pipelines.local.validate_alone import champion_suite_of

        suite, version = champion_suite_of(existing_registry_uri(args, config.registry.tracking_uri), config)
        _write(args.out, suite)
        print(f"suite of {config.registry.model_name} v{version} ({len(suite['expectations'])} expectations)")
        print(args.out)
        return 0
    return _check(args, config)


def _check(args: argparse.Namespace, config) -> int:
    from ctpipe.pipelines.local.validate_alone import check_data

    result = check_data(args.data, config, args.out, suite_path=args.suite)
    print(f"data validation passed: rows {result.rows}, {len(result.warnings)} warning(s)")
    for warning in result.warnings:
        print(f"  warning: {warning}")
    print(Path(args.out) / "data_docs.html")
    return 0


def _write(path: str, suite: dict) -> None:
    atomic_write_text(path, json.dumps(suite, indent=2, default=str))
