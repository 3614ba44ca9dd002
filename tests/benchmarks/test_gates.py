"""benchmarks/gates.py: the contract of its output, and its drift corpus run end to end."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

from tests.fixtures.paths import REPO_ROOT

BENCHMARKS = REPO_ROOT / "benchmarks"


def test_counts_follow_the_contract():
    spec = importlib.util.spec_from_file_location("gates_benchmark", BENCHMARKS / "gates.py")
    gates = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gates)
    tally = gates.tally

    def case(gate, expected, blocked):
        return {"name": "x", "gate": gate, "expected_block": expected, "blocked": blocked, "detail": ""}

    result = tally([case("sanity", False, True), case("sanity", True, False), case("validation", True, True),
                    case("drift", False, True), case("drift", True, False), case("drift", False, False)])
    assert (result["cases"], result["false_blocks"], result["missed_bugs"]) == (6, 1, 1)
    assert (result["false_drift"], result["missed_drift"]) == (1, 1)
    assert result["by_gate"]["drift"] == {"cases": 3, "healthy": 2, "broken": 1, "false_drift": 1, "missed_drift": 1}


def test_drift_corpus_runs_and_prints_one_json_line_last():
    done = subprocess.run([sys.executable, str(BENCHMARKS / "gates.py"), "--only", "drift"], capture_output=True,
                          text=True, check=False, timeout=300)
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert result["cases"] == result["by_gate"]["drift"]["cases"] == len(lines) - 1 >= 20
    assert {k: result[k] for k in ("false_blocks", "missed_bugs", "false_drift", "missed_drift")} == dict.fromkeys(
        ("false_blocks", "missed_bugs", "false_drift", "missed_drift"), 0)


def test_split_corpus_runs_and_decides_every_case_as_expected():
    done = subprocess.run([sys.executable, str(BENCHMARKS / "gates.py"), "--only", "splits"], capture_output=True,
                          text=True, check=False, timeout=300)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(lines[-1])
    assert result["cases"] == result["by_gate"]["split"]["cases"] == len(lines) - 1 >= 20
    assert any("datetime columns as CSV" in line for line in lines)
