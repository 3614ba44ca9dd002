"""Gate benchmark: a small simulation corpus of healthy and broken cases, run through the real gates.

    python benchmarks/gates.py [--seed 0] [--quick | --ci] [--only sanity,drift,lm_blessing,text_drift]

Every module in ``benchmarks/gate_cases/`` has ``cases(seed) -> list[dict]``; each dict is one case already
decided by the real gate code: ``name``, ``gate`` (split, select, bless, sanity, validation, drift),
``expected_block`` (a broken case: a bug, a worse model, a drifted window, a moved split), ``blocked``
(what the gate decided; for drift: fired) and ``detail`` (one line). The script prints one line per case,
then one JSON line: ``false_blocks`` (healthy cases blocked) and ``missed_bugs`` (broken cases passed) over
the gates other than drift, ``false_drift`` and ``missed_drift`` for drift, the case count, the same per
gate, and the seconds. ``--quick`` keeps every other case of each module; ``--ci`` runs a module's ``ci_cases``
where it has them (one case of each class at smaller settings: CI's check) and no calibration. Exit code 0 when
all four are 0 (and the calibrations are within their levels).

The calibrations in ``benchmarks/gate_calibration/`` add their figures to the JSON line: ``lm_blessing``
(``lm_equal_pairs``, ``lm_false_blocks``, ``lm_false_block_rate`` with its Wilson 95 % interval
``lm_false_block_rate_95``, against ``lm_nominal_block_rate`` and the sign-flip test's own level
``lm_level_by_construction``) and ``text_drift`` (``text_drift_false_alarm_rate`` on same-source resamples,
``text_drift_detected`` per shift). ``--only lm_blessing,text_drift`` runs just them; ``--pairs`` (2,000: 200
pairs cannot tell 2.5 % from 4 %) and ``--resamples`` (200) size them.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import time
from collections import defaultdict

from scipy.stats import binomtest

COUNTS = ("false_blocks", "missed_bugs", "false_drift", "missed_drift")
CALIBRATIONS = ("lm_blessing", "text_drift")


def load_cases(seed: int, quick: bool, only: set[str], ci: bool = False) -> list[dict]:
    """The cases of every gate_cases module (or of those named in ``only``), in module order."""
    import gate_cases

    out: list[dict] = []
    for name in sorted(m.name for m in pkgutil.iter_modules(gate_cases.__path__)):
        if only and name not in only:
            continue
        module = importlib.import_module(f"gate_cases.{name}")
        found = module.ci_cases(seed) if ci and hasattr(module, "ci_cases") else module.cases(seed)
        out.extend(found[::2] if quick else found)
    return out


def calibrate(seed: int, only: set[str], pairs: int, resamples: int) -> dict:
    """The figures of each calibration (or of those named in ``only``)."""
    from gate_calibration import lm_blessing, text_drift

    figures: dict = {}
    if not only or "lm_blessing" in only:
        figures.update(lm_blessing.measure(seed, pairs))
    if not only or "text_drift" in only:
        figures.update(text_drift.measure(seed, resamples))
    return figures


def calibration_failures(figures: dict) -> list[str]:
    """What a calibration's figures show wrong: an equal-pair block rate above its nominal level (beyond the
    binomial noise of the pairs), a worse LM passing, a shift missed in most draws, false alarms
    beyond their nominal rate (both beyond the binomial noise of the draws)."""
    failures = []
    if figures.get("lm_equal_pairs"):
        pairs, blocks, nominal = figures["lm_equal_pairs"], figures["lm_false_blocks"], figures["lm_nominal_block_rate"]
        if binomtest(blocks, pairs, nominal, alternative="greater").pvalue < 0.01:
            failures.append(f"lm_false_block_rate {blocks}/{pairs} is above the nominal {nominal}")
        if not figures["lm_worse_candidate_blocked"]:
            failures.append("a clearly worse language model was blessed")
    if figures.get("text_drift_resamples"):
        missed = [k for k, v in figures["text_drift_detected"].items() if v < 0.5]
        if missed:
            failures.append(f"text drift missed in most draws: {', '.join(missed)}")
        nominal = figures["text_drift_nominal_false_alarm_rate"]
        if binomtest(figures["text_drift_false_alarms"], figures["text_drift_resamples"], nominal,
                     alternative="greater").pvalue < 0.01:
            failures.append(f"text drift false alarms {figures['text_drift_false_alarm_rate']} above the nominal {nominal}")
    return failures


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
    parser.add_argument("--ci", action="store_true", help="one case of each class, smaller settings, no calibration")
    parser.add_argument("--only", default="",
                        help="comma-separated gate_cases modules and calibrations to run (default: all)")
    parser.add_argument("--pairs", type=int, default=2000, help="equal-quality LM pairs (lm_blessing)")
    parser.add_argument("--resamples", type=int, default=200, help="same-source text windows (text_drift)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    only = {m.strip() for m in args.only.split(",") if m.strip()}
    case_modules = only - set(CALIBRATIONS)
    cases = load_cases(args.seed, args.quick, case_modules, args.ci) if case_modules or not only else []
    for case in cases:
        verdict = "WRONG" if miss_kind(case) else "ok   "
        kind = "broken " if case["expected_block"] else "healthy"
        outcome = ("fired  " if case["blocked"] else "quiet  ") if case["gate"] == "drift" else (
            "blocked" if case["blocked"] else "passed ")
        print(f"{verdict} {case['gate']:<10} {kind} {outcome} {case['name']}: {case['detail']}", flush=True)
    figures = {} if args.ci or (only and not only & set(CALIBRATIONS)) else calibrate(
        args.seed, only & set(CALIBRATIONS), args.pairs, args.resamples)
    failures = calibration_failures(figures)
    for failure in failures:
        print(f"WRONG calibration: {failure}", flush=True)
    result = {**tally(cases), **figures, "calibration_failures": len(failures), "seed": args.seed,
              "seconds": round(time.perf_counter() - started, 1)}
    print(json.dumps(result))
    return 0 if not any(result[k] for k in COUNTS) and not failures else 1


if __name__ == "__main__":
    raise SystemExit(main())
