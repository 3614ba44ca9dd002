"""Profile of a newcomer's first `ctpipe run`: where its CPU goes, every process of it, by part.

    pip install py-spy
    python benchmarks/profile_first_run.py [--rate 50] [--keep DIR] [--samples FILE]

It runs ``ctpipe run`` on a fresh temporary home under ``py-spy record --subprocesses --format raw`` (every
process of the run: the CLI, the warm-start server and the steps and ranks forked from it, the serving
check's standby), then sorts every sample into one part: the imports of a library (the outermost module a
``_find_and_load`` frame imports), or the step whose code the sample is in. py-spy samples only threads that
run, so a part's share of the samples is its share of the run's CPU time. ``--samples FILE`` re-reads an
earlier raw profile instead of recording one. The last line printed is one JSON object: ``samples``,
``cpu_seconds`` (samples / rate) and ``parts`` (share of the samples, largest first).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

# The first matching rule names a sample's part; a frame is "function (path:line)", a process "process N:cmd".
STEP_PARTS = (
    ("tracking/sqlite_store.py", "MLflow store set-up (a new home: schema migrations)"),
    ("steps/train/worker.py", "training ranks: compute"),
    ("engine/saving.py", "checkpoint saves"),
    ("run_sanity_checks", "sanity gate: compute"),
    ("evaluate_candidate", "evaluate: compute (linear baseline, bootstrap, report)"),
    ("register_candidate", "register: model files, pyfunc, serving check"),
    ("load_context", "register: model files, pyfunc, serving check"),
    ("validate_data", "validate: compute"),
    ("prepare_run", "prepare run: compute"),
)
LIBRARIES = {"torch", "sympy", "mlflow", "great_expectations", "kfp", "pandas", "pyarrow", "sklearn", "scipy"}
_MODULE = re.compile(r"<module> \((.*?):\d+\)")


def imported_library(frames: list[str]) -> str | None:
    """The package of the outermost module being imported in a stack (root first), or None outside imports."""
    for i, frame in enumerate(frames):
        if frame.startswith("_find_and_load"):
            for later in frames[i:]:
                if match := _MODULE.match(later):
                    top = match.group(1).split("site-packages/")[-1].split("/")[0].removesuffix(".py")
                    return {"sympy": "torch"}.get(top, top) if top in LIBRARIES else "other"
            return "other"
    return None


def part_of(stack: str) -> str:
    """The part one collapsed stack (``frame;frame;...``, root first) belongs to."""
    frames = [frame for frame in stack.split(";") if not frame.startswith("process ")]
    standby = "warm_start/standby.py" in stack
    library = imported_library(frames)
    if standby and library:
        return "standby: imports for the serving check (nice 19)"
    if library:
        return f"imports: {library}"
    return next((part for marker, part in STEP_PARTS if marker in stack), "other: CLI, KFP local runner, progress")


def read_collapsed(path: Path) -> Counter:
    """py-spy's raw format: one ``stack count`` a line; a process's command line may span lines."""
    counts: Counter = Counter()
    pending = ""
    for line in path.read_text(errors="replace").splitlines():
        pending += line
        if match := re.search(r" (\d+)$", pending):
            counts[pending[: match.start()]] += int(match.group(1))
            pending = ""
    return counts


def summarise(counts: Counter, rate: int) -> dict:
    parts: Counter = Counter()
    for stack, n in counts.items():
        parts[part_of(stack)] += n
    total = sum(parts.values())
    return {"samples": total, "cpu_seconds": round(total / rate, 1),
            "parts": {part: round(n / total, 3) for part, n in parts.most_common()} if total else {}}


def record(out: Path, rate: int) -> Path:
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        sys.exit("py-spy is not installed: pip install py-spy")
    samples = out / "first_run.txt"
    subprocess.run([py_spy, "record", "--subprocesses", "--rate", str(rate), "--format", "raw", "-o", str(samples),
                    "--", sys.executable, "-m", "ctpipe.pipelines.cli.main", "run", "--home", str(out / "home")],
                   check=True, stdout=subprocess.DEVNULL)
    return samples


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=50, help="samples per second per thread (py-spy's --rate)")
    parser.add_argument("--keep", type=Path, help="keep the home and the raw profile here (default: a temp folder)")
    parser.add_argument("--samples", type=Path, help="summarise this raw py-spy profile instead of recording one")
    args = parser.parse_args(argv)
    if args.rate < 1:
        parser.error("--rate must be at least 1")
    if args.samples:
        samples = args.samples
    else:
        out = args.keep or Path(tempfile.mkdtemp(prefix="ctpipe-profile-"))
        out.mkdir(parents=True, exist_ok=True)
        samples = record(out, args.rate)
        print(f"raw profile: {samples}", file=sys.stderr)
    result = summarise(read_collapsed(samples), args.rate)
    for part, share in result["parts"].items():
        print(f"{share:6.1%}  {part}", file=sys.stderr)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
