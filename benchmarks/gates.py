"""Gate benchmark: a small simulation corpus of healthy and broken cases, run through the real gates.

    python benchmarks/gates.py [--seed 0] [--quick]

Every module in ``benchmarks/gate_cases/`` has ``cases(seed) -> list[dict]``; each dict is one case
already decided by the real gate code: ``name``, ``gate``, ``expected_block`` (a broken case), ``blocked``
(what the gate decided; for drift: fired) and ``detail``. One line per case, then one JSON line:
false_blocks / missed_bugs (gates other than drift), false_drift / missed_drift, the case count, by gate.
(This is the minimal runner of branch issue-10a; the contract is /work/notes/gates_contract.md.)
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import time
from collections import defaultdict


def load_cases(seed: int, quick: bool) -> list[dict]:
    import gate_cases

    out = []
    for module in sorted(m.name for m in pkgutil.iter_modules(gate_cases.__path__)):
        found = importlib.import_module(f"gate_cases.{module}").cases(seed)
        out.extend(found[::2] if quick else found)
    return out


def tally(cases: list[dict]) -> dict:
    counts = {"false_blocks": 0, "missed_bugs": 0, "false_drift": 0, "missed_drift": 0}
    by_gate: dict[str, dict[str, int]] = defaultdict(lambda: {"cases": 0, "healthy": 0, "broken": 0, "wrong": 0})
    for case in cases:
        wrong = case["blocked"] != case["expected_block"]
        drift = case["gate"] == "drift"
        if wrong:
            key = ("false_drift" if drift else "false_blocks") if case["blocked"] else (
                "missed_drift" if drift else "missed_bugs")
            counts[key] += 1
        gate = by_gate[case["gate"]]
        gate["cases"] += 1
        gate["broken" if case["expected_block"] else "healthy"] += 1
        gate["wrong"] += wrong
    return {"cases": len(cases), **counts, "by_gate": dict(by_gate)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="seed of the simulated data (default 0)")
    parser.add_argument("--quick", action="store_true", help="every other case of each module")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    cases = load_cases(args.seed, args.quick)
    for case in cases:
        verdict = "ok   " if case["blocked"] == case["expected_block"] else "WRONG"
        kind = "broken " if case["expected_block"] else "healthy"
        print(f"{verdict} {case['gate']:<10} {kind} {'blocked' if case['blocked'] else 'passed '} {case['name']}: "
              f"{case['detail']}")
    print(json.dumps({**tally(cases), "seconds": round(time.perf_counter() - started, 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
