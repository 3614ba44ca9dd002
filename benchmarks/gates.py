"""Gate benchmark: a small simulation corpus of healthy and broken cases, run through the real gates.

    python benchmarks/gates.py [--seed 0] [--quick] [--only sanity,drift]

Every module in ``benchmarks/gate_cases/`` has ``cases(seed) -> list[dict]``; each dict is one case already
decided by the real gate code: ``name``, ``gate`` (split, select, bless, sanity, validation, drift),
``expected_block`` (a broken case: a bug, a worse model, a drifted window, a moved split), ``blocked``
(what the gate decided; for drift: fired) and ``detail`` (one line). The script prints one line per case,
then one JSON line: ``false_blocks`` (healthy cases blocked) and ``missed_bugs`` (broken cases passed) over
the gates other than drift, ``false_drift`` and ``missed_drift`` for drift, the case count, the same per
gate, and the seconds. ``--quick`` keeps every other case of each module. Exit code 0 when all four are 0.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import time
from collections import defaultdict

COUNTS = ("false_blocks", "missed_bugs", "false_drift", "missed_drift")


def load_cases(seed: int, quick: bool, only: set[str]) -> list[dict]:
    """The cases of every gate_cases module (or of those named in ``only``), in module order."""
    import gate_cases

    out: list[dict] = []
    for name in sorted(m.name for m in pkgutil.iter_modules(gate_cases.__path__)):
        if only and name not in only:
            continue
        found = importlib.import_module(f"gate_cases.{name}").cases(seed)
        out.extend(found[::2] if quick else found)
    return out


def miss_kind(case: dict) -> str | None:
    """Which count a wrongly decided case adds to (None when the gate decided as expected)."""
    if case["blocked"] == case["expected_block"]:
        return None
    if case["gate"] == "drift":
        return "false_drift" if case["blocked"] else "missed_drift"
    return "false_blocks" if case["blocked"] else "missed_bugs"


def tally(cases: list[dict]) -> dict:
    totals = dict.fromkeys(COUNTS, 0)
    by_gate: dict[str, dict[str, int]] = defaultdict(lambda: {"cases": 0, "healthy": 0, "broken": 0})
    for case in cases:
        gate = by_gate[case["gate"]]
        gate["cases"] += 1
        gate["broken" if case["expected_block"] else "healthy"] += 1
        kind = miss_kind(case)
        if kind:
            totals[kind] += 1
            gate[kind] = gate.get(kind, 0) + 1
    return {"cases": len(cases), **totals, "by_gate": dict(by_gate)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="seed of the simulated data (default 0)")
    parser.add_argument("--quick", action="store_true", help="every other case of each module")
    parser.add_argument("--only", default="", help="comma-separated gate_cases modules to run (default: all)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    cases = load_cases(args.seed, args.quick, {m.strip() for m in args.only.split(",") if m.strip()})
    for case in cases:
        verdict = "WRONG" if miss_kind(case) else "ok   "
        kind = "broken " if case["expected_block"] else "healthy"
        outcome = ("fired  " if case["blocked"] else "quiet  ") if case["gate"] == "drift" else (
            "blocked" if case["blocked"] else "passed ")
        print(f"{verdict} {case['gate']:<10} {kind} {outcome} {case['name']}: {case['detail']}", flush=True)
    result = {**tally(cases), "seed": args.seed, "seconds": round(time.perf_counter() - started, 1)}
    print(json.dumps(result))
    return 0 if not any(result[k] for k in COUNTS) else 1


if __name__ == "__main__":
    raise SystemExit(main())
