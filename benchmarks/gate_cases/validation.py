"""Data validation gate cases: healthy data of several kinds, and broken exports of the demo data.

Each case writes partitions and runs the pipeline's ``validate_data``; ``blocked`` is "DataValidationError".
Cases marked "vs suite" are judged against a reviewed suite profiled from other clean demo data (as the
champion's stored suite would be), the others against a suite profiled from their own train split.
Healthy: demo data, weak-signal and rare-positive data, drifted days (a reason to retrain: warnings),
a new column that is a real feature (a warning anomaly). Broken: a dropped column, a changed type, the
label leaked into a feature of every partition or of the newest one only (and of rare-positive data),
a column dropped from or written as codes by the newest of 120 partitions (under 1% of the rows), unseen
categories and out-of-range values on more than 1% of rows, nulls in a required column, rows duplicated
across splits.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.data.simulate import rare_positive_day, weak_signal_day, write_partitions
from ctpipe.components.lib.errors import DataValidationError
from ctpipe.components.steps.validate_data.validate import validate_data

KEY = "customer_id"
CLASS_CODES = {"churn": 0, "downgrade": 1, "stay": 2, "upgrade": 3}
CLASS_CODES_PLAN = {"free": 0, "basic": 1, "pro": 2, "enterprise": 3}
Edit = Callable[[pd.DataFrame, np.random.Generator], pd.DataFrame]


def _edit(data: Path, edit: Edit, *, newest_only: bool = False) -> None:
    parts = sorted(data.glob("date=*/part-0.parquet"))
    for part in parts[-1:] if newest_only else parts:
        edit(pd.read_parquet(part), np.random.default_rng(7)).to_parquet(part, index=False)


def _validate(data: Path, out: Path, suite: Path | None) -> tuple[bool, str]:
    cfg = Config.from_dict({"data": {"key": KEY}, "validation": {"suite_path": str(suite) if suite else None}})
    try:
        result = validate_data(str(data), cfg, snapshot_dir=str(out / "snapshot"), data_docs_path="",
                               report_path=str(out / "report.md"), tracking_uri="", mlflow_run_id="")
    except DataValidationError as err:
        return True, str(err).split(": (1) ", 1)[-1][:180]
    warned = f"; {len(result.warnings)} warning(s), first: {result.warnings[0][:100]}" if result.warnings else ""
    return False, f"passed ({sum(result.rows.values())} rows){warned}"


def _leak(frame: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    frame["account_status_code"] = frame["label"].map(CLASS_CODES).astype("float64") + rng.normal(0, 0.05, len(frame))
    return frame


def _set(column: str, value, share: float) -> Edit:
    def edit(frame: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
        frame.loc[rng.random(len(frame)) < share, column] = value
        return frame

    return edit


def _with(column: str, make: Callable[[pd.DataFrame], object]) -> Edit:
    def edit(frame: pd.DataFrame, _: np.random.Generator) -> pd.DataFrame:
        frame[column] = make(frame)
        return frame

    return edit


def _duplicated(frame: pd.DataFrame, _: np.random.Generator) -> pd.DataFrame:
    copies = frame.sample(frac=0.3, random_state=1).copy()
    copies[KEY] = copies[KEY] + 50_000_000  # re-keyed copies hash into other splits
    return pd.concat([frame, copies], ignore_index=True)


def cases(seed: int) -> list[dict]:
    found = []
    with tempfile.TemporaryDirectory(prefix="ctpipe-gates-validation-") as tmp:
        root = Path(tmp)
        write_demo_data(root / "reference", days=3, rows_per_day=600, seed=seed + 100)
        _validate(root / "reference", root / "reference-out", None)
        suite = root / "reference-out" / "snapshot" / "suite.json"

        def demo(name: str, broken: bool, edit: Edit | None = None, *, vs_suite: bool = True,
                 newest_only: bool = False, drift_from_day: int | None = None) -> None:
            data = root / name.replace(" ", "_")
            write_demo_data(data, days=3, rows_per_day=600, seed=seed, drift_from_day=drift_from_day)
            if edit:
                _edit(data, edit, newest_only=newest_only)
            blocked, detail = _validate(data, root / f"{data.name}-out", suite if vs_suite else None)
            label = f"{name}{' (vs suite)' if vs_suite else ''}"
            found.append({"name": label, "gate": "validation", "expected_block": broken, "blocked": blocked,
                          "detail": detail})

        demo("demo data", False, vs_suite=False)
        demo("demo data", False)
        for kind, day in (("weak signal", weak_signal_day), ("rare positives", rare_positive_day)):
            data = root / kind.replace(" ", "_")
            write_partitions(data, day, days=7, rows_per_day=3000, seed=seed)
            blocked, detail = _validate(data, root / f"{data.name}-out", None)
            found.append({"name": kind, "gate": "validation", "expected_block": False, "blocked": blocked,
                          "detail": detail})
        data = root / "rare_positives_leaked"  # a copy of a 0.6%-positive label: the majority alone is 99.4%
        write_partitions(data, rare_positive_day, days=7, rows_per_day=3000, seed=seed)
        _edit(data, _with("chargeback", lambda f: (f["label"] == "yes").astype("int64")))
        blocked, detail = _validate(data, root / f"{data.name}-out", None)
        found.append({"name": "label leaked into a feature of rare-positive data", "gate": "validation",
                      "expected_block": True, "blocked": blocked, "detail": detail})
        for name, edit in (("a column dropped from the newest of 120 partitions",
                            lambda f, _: f.drop(columns=["sessions_last_30d"])),
                           ("plan exported as codes by the newest of 120 partitions",
                            _with("plan", lambda f: f["plan"].map(CLASS_CODES_PLAN)))):
            data = root / name.replace(" ", "_")
            write_demo_data(data, days=120, rows_per_day=300, seed=seed)
            _edit(data, edit, newest_only=True)
            blocked, detail = _validate(data, root / f"{data.name}-out", suite)
            found.append({"name": f"{name} (vs suite)", "gate": "validation", "expected_block": True,
                          "blocked": blocked, "detail": detail})
        demo("drifted newest day", False, drift_from_day=2)
        demo("a new feature column in the newest partition", False,
             _with("referrals", lambda f: np.random.default_rng(3).poisson(1.0, len(f))), newest_only=True)
        demo("column dropped", True, lambda f, _: f.drop(columns=["satisfaction"]))
        demo("type changed (plan exported as codes)", True,
             _with("plan", lambda f: f["plan"].map({"free": 0, "basic": 1, "pro": 2, "enterprise": 3})))
        demo("label leaked into a feature", True, _leak, vs_suite=False)
        demo("label leaked into a column only the newest partition has", True, _leak, vs_suite=False,
             newest_only=True)
        demo("unseen category on 10% of rows", True, _set("region", "mars", 0.1), newest_only=True)
        demo("sign error on 10% of rows", True, _set("monthly_spend", -500.0, 0.1), newest_only=True)
        demo("nulls in a required column", True, _set("tenure_months", np.nan, 0.2), newest_only=True)
        demo("rows duplicated across splits", True, _duplicated, vs_suite=False)
    return found
