"""Strong-baseline benchmark: the default tabular model against the linear baseline on small public tables.

    python benchmarks/baselines.py [--tables diabetes,breast_cancer,wine,iris] [--seeds 1234,1,2] [--set KEY=VALUE ...]
                                   [--keep DIR]

For each table that scikit-learn ships on disk (``load_diabetes``: regression, 442 rows; ``load_breast_cancer``:
2 classes, 569; ``load_wine``: 3 classes, 178; ``load_iris``: 3 classes, 150; nothing is downloaded) it writes the
rows as three daily Parquet partitions and runs the whole pipeline on them (``ctpipe run`` in a new process on a
fresh home, the default model and training, ``data.key=id``, ``data.label=target``, and val/test fractions of
0.15/0.25 so that the test split holds 23-142 rows; wine and iris with ``train.batch_size=32``, since their
train splits give two workers fewer than 64 rows each), then reads the evaluation's ``blessing.json``: the candidate's
metrics, the linear baseline's (logistic or ridge regression on the same encoded features, fitted on the same train
split, scored on the same test rows: ``components/steps/evaluate/linear_baseline.py``) and the trivial one's, and
the paired interval of candidate − linear. Per table: ``metric`` (accuracy, or RMSE for the regression), ``model``,
``linear``, ``trivial``, ``ratio`` (model / linear, in the metric's better direction: >= 1 is at least as good),
``difference`` and its 95 % interval (improvement over the linear model), ``log_loss`` of both for the classifiers,
``blessed`` and ``seconds``. The last line printed is one JSON object, with ``all_at_least_as_good`` (every table's
``ratio`` >= 1) and ``all_blessed``.

``--seeds`` trains each table once per ``train.seed`` (the same data, split and linear baseline; default 1234, the
config's): on 23-154 test rows one row or one seed's checkpoint moves the comparison (diabetes' default model:
RMSE 66.7, 60.5 and 63.5 with seeds 1234, 1 and 2 against ridge's 61.5), so a table's line then carries what the
seeds share (``metric``, ``linear``, ``trivial``, ``test_rows``), each seed's own figures (``seeds``), ``model`` and
``ratio`` their medians, and ``blessed`` true when every seed's model was. One seed prints the single run's line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TABLES = {"diabetes": "tabular_regression", "breast_cancer": "tabular_classification",
          "wine": "tabular_classification", "iris": "tabular_classification"}
SPLITS = ("data.val_fraction=0.15", "data.test_fraction=0.25")
# wine's 107 and iris' 90 train rows give each of the 2 local workers fewer than the default 64 a batch (validation
# refuses that, naming train.batch_size): the one setting these two tables need.
TABLE_SETTINGS = {"wine": ("train.batch_size=32",), "iris": ("train.batch_size=32",)}


def write_table(name: str, out: Path, days: int = 3) -> Path:
    """scikit-learn's ``load_<name>`` table as ``days`` partitions, with an ``id`` key and the label ``target``."""
    import sklearn.datasets

    frame = getattr(sklearn.datasets, f"load_{name}")(as_frame=True).frame
    frame.columns = [str(c).replace(" ", "_").replace("(", "").replace(")", "").replace("/", "_") for c in frame.columns]
    # scikit-learn sorts iris and wine by class: shuffled (seeded) so that each day holds every class, as a day of
    # real data would (validation's label shares would rightly refuse days that each hold one class).
    # iris repeats a row, which validation refuses across splits (the fix it names: deduplicate the data).
    frame = frame.drop_duplicates().sample(frac=1.0, random_state=0).reset_index(drop=True)
    frame.insert(0, "id", np.arange(len(frame)))
    for day, rows in enumerate(np.array_split(np.arange(len(frame)), days)):
        part = out / f"date=2026-01-{day + 1:02d}" / "part-0.parquet"
        part.parent.mkdir(parents=True, exist_ok=True)
        frame.iloc[rows].to_parquet(part, index=False)
    return out


def run_pipeline(name: str, root: Path, settings: list[str], seed: int | None = None) -> dict:
    """``ctpipe run`` on one table (with ``train.seed=seed`` when given, in a home of its own); its blessing."""
    place = root / name if seed is None else root / name / f"seed-{seed}"
    data = write_table(name, place / "data")
    home = place / "home"
    if seed is not None:
        settings = [*settings, f"train.seed={seed}"]
    command = [sys.executable, "-m", "ctpipe.pipelines.cli.main", "run", "--data", str(data), "--home", str(home),
               "--set", f"task.name={TABLES[name]}", "--set", "data.key=id", "--set", "data.label=target",
               "--set", f"registry.model_name=ctpipe-{name.replace('_', '-')}",
               *[arg for s in (*SPLITS, *TABLE_SETTINGS.get(name, ()), *settings) for arg in ("--set", s)]]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    blessings = sorted(home.glob("pipeline_root/*/evaluate/blessing"), key=lambda p: p.stat().st_mtime)
    if not blessings:
        raise RuntimeError(f"{name}: the pipeline wrote no blessing (exit {done.returncode}): {done.stdout[-2000:]}")
    return {"blessing": json.loads(blessings[-1].read_text()), "seconds": seconds, "exit": done.returncode}


def figures(name: str, result: dict) -> dict:
    """The table's line: the primary metric of model, linear and trivial baselines, and their comparison."""
    blessing = result["blessing"]
    metric = "rmse" if TABLES[name] == "tabular_regression" else "accuracy"
    higher = metric != "rmse"
    model, linear = blessing["candidate_metrics"][metric], blessing["linear_metrics"][metric]
    diff = blessing["linear_differences"][metric]
    sign = 1 if higher else -1
    out = {
        "metric": metric, "model": round(model, 4), "linear": round(linear, 4),
        "trivial": round(blessing["baseline_metrics"][metric], 4),
        "ratio": round(model / linear if higher else linear / model, 4),
        "difference": round(sign * diff["value"], 4),
        "difference_95": [round(sign * diff["low" if higher else "high"], 4), round(sign * diff["high" if higher else "low"], 4)],
        "test_rows": blessing["test_rows"], "blessed": blessing["blessed"], "seconds": round(result["seconds"], 1),
    }
    if higher:
        out["log_loss"] = {"model": round(blessing["candidate_metrics"]["log_loss"], 4),
                           "linear": round(blessing["linear_metrics"]["log_loss"], 4)}
    return out


def over_seeds(runs: dict[int, dict]) -> dict:
    """One table's line over several training seeds: what they share (metric, linear and trivial baselines, test
    rows), each seed's own figures, ``model`` and ``ratio`` their medians and ``blessed`` whether every seed's was."""
    lines = list(runs.values())
    shared = ("metric", "linear", "trivial", "test_rows")  # the same data, split and linear baseline for every seed
    out = {key: lines[0][key] for key in shared}
    out["seeds"] = {str(seed): {key: value for key, value in line.items() if key not in shared}
                    for seed, line in runs.items()}
    out["model"] = round(float(np.median([line["model"] for line in lines])), 4)
    out["ratio"] = round(float(np.median([line["ratio"] for line in lines])), 4)
    out["blessed"] = all(line["blessed"] for line in lines)
    out["seconds"] = round(sum(line["seconds"] for line in lines), 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default=",".join(TABLES), help="comma-separated scikit-learn tables")
    parser.add_argument("--seeds", help="comma-separated train.seed values, each table trained once per seed "
                        "(default: the config's seed, one run)")
    parser.add_argument("--set", action="append", default=[], help="a config setting for every run (KEY=VALUE)")
    parser.add_argument("--keep", help="keep the homes and data under this directory")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    tables: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="ctpipe-baselines-") as tmp:
        root = Path(args.keep or tmp)
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()] if args.seeds else [None]
        for name in [t.strip() for t in args.tables.split(",") if t.strip()]:
            runs = {}
            for seed in seeds:
                runs[seed] = line = figures(name, run_pipeline(name, root, args.set, seed))
                print(f"{name:14s} {line['metric']:8s} model {line['model']:.4f} linear {line['linear']:.4f} "
                      f"trivial {line['trivial']:.4f} ratio {line['ratio']:.3f} blessed {line['blessed']}"
                      + (f" (train.seed {seed})" if seed is not None else ""), flush=True)
            tables[name] = runs[seeds[0]] if seeds == [None] else over_seeds(runs)
    result = {"tables": tables, "all_at_least_as_good": all(t["ratio"] >= 1 for t in tables.values()),
              "all_blessed": all(t["blessed"] for t in tables.values()), "settings": args.set,
              "seeds": [s for s in seeds if s is not None],
              "seconds": round(time.perf_counter() - started, 1)}
    print(json.dumps(result))
    return 0 if result["all_at_least_as_good"] and result["all_blessed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
