"""Validation + sanity benchmark: the first two pipeline steps on the demo data and on 1,000,000 rows.

    python benchmarks/validation.py [--rows 1000000] [--repeats 2] [--out DIR]

Each measurement runs in a fresh interpreter, as a KFP step does, so import costs (Great Expectations
≈ 4 s, torch ≈ 2 s) are counted. Datasets: the demo data (7 days x 1,000 rows) and 10 days x rows/10
of the same generator. Per run it reports the step's wall time from process start and the time spent
inside the function; validation also reports its phases. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEP = r"""
import json, sys, time
start = time.perf_counter()
from ctpipe.components.lib.config import Config
cfg = Config.from_dict({"data": {"key": "customer_id"}})
step, data, out = sys.argv[1], sys.argv[2], sys.argv[3]
if step == "validate":
    from ctpipe.components.steps.validate_data.validate import validate_data
    t = time.perf_counter()
    import great_expectations  # noqa: F401  (timed apart: the step pays it once)
    gx_import = time.perf_counter() - t
    t = time.perf_counter()
    r = validate_data(data, cfg, snapshot_dir=out + "/snapshot", data_docs_path=out + "/docs.html",
                      report_path=out + "/report.md", tracking_uri="", mlflow_run_id="")
    inner = time.perf_counter() - t
    extra = {"rows": r.rows, "warnings": len(r.warnings), "gx_import_s": gx_import}
else:
    from ctpipe.components.steps.sanity_checks.gate import run_sanity_checks
    t = time.perf_counter()
    r = run_sanity_checks(out + "/snapshot", cfg, report_path=out + "/sanity.md",
                          first_batch_path=out + "/first_batch.json", tracking_uri="", mlflow_run_id="")
    inner = time.perf_counter() - t
    extra = {"passed": r.passed, "checks_s": {c.name: round(c.seconds, 3) for c in r.checks}}
print(json.dumps({"step": step, "inner_s": inner, "process_s": time.perf_counter() - start, **extra}))
"""


def run_step(step: str, data: Path, out: Path) -> dict:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", STEP, step, str(data), str(out)], capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{step} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall_s"] = wall
    return result


def phases(out: Path) -> dict[str, float]:
    """The validation phases, from the Markdown report's timing line."""
    for line in (out / "report.md").read_text().splitlines():
        if line.startswith("Timings (s): "):
            return {
                k: float(v) for k, v in (p.rsplit(" ", 1) for p in line[len("Timings (s): ") :].split(", "))
            }
    return {}


def bench(name: str, data: Path, work: Path, repeats: int) -> dict:
    runs = []
    for i in range(repeats):
        out = work / f"{name}-{i}"
        out.mkdir(parents=True)
        v = run_step("validate", data, out)
        s = run_step("sanity", data, out)
        runs.append({"validate": v, "sanity": s, "phases": phases(out)})

    def med(f):
        return round(statistics.median(f(r) for r in runs), 3)

    return {
        "rows": sum(runs[0]["validate"]["rows"].values()),
        "validate_wall_s": med(lambda r: r["validate"]["wall_s"]),
        "validate_inner_s": med(lambda r: r["validate"]["inner_s"]),
        "gx_import_s": med(lambda r: r["validate"]["gx_import_s"]),
        "sanity_wall_s": med(lambda r: r["sanity"]["wall_s"]),
        "sanity_inner_s": med(lambda r: r["sanity"]["inner_s"]),
        "total_wall_s": med(lambda r: r["validate"]["wall_s"] + r["sanity"]["wall_s"]),
        "validate_phases_s": {
            k: round(statistics.median(r["phases"].get(k, 0.0) for r in runs), 3) for k in runs[0]["phases"]
        },
        "sanity_checks_s": runs[-1]["sanity"]["checks_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=None, help="work directory (default: a temp dir)")
    args = parser.parse_args()
    from ctpipe.components.lib.data.demo import write_demo_data

    work = Path(args.out or tempfile.mkdtemp(prefix="ctpipe-bench-validation-"))
    demo, big = work / "demo", work / "big"
    write_demo_data(demo, days=7, rows_per_day=1000)
    t = time.perf_counter()
    write_demo_data(big, days=10, rows_per_day=args.rows // 10)
    generate = time.perf_counter() - t
    result = {
        "benchmark": "validation+sanity",
        "demo": bench("demo", demo, work, args.repeats),
        "large": bench("large", big, work, args.repeats),
        "large_generate_s": round(generate, 3),
        "repeats": args.repeats,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
