"""benchmarks/profile_first_run.py: py-spy's collapsed stacks sorted into the parts of a first run."""

from __future__ import annotations

import importlib.util

from tests.fixtures.paths import REPO_ROOT

spec = importlib.util.spec_from_file_location("profile_bench", REPO_ROOT / "benchmarks" / "profile_first_run.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

SERVER = 'process 2:"python -m ctpipe.components.lib.warm_start.server /tmp/s.sock"'
IMPORT = "_find_and_load (<frozen importlib._bootstrap>:1360)"


def test_a_sample_inside_an_import_is_the_outermost_library_imported_not_the_step():
    stack = ";".join([SERVER, "run_sanity_checks (components/steps/sanity_checks/gate.py:83)",
                      "Optimizer.__init__ (torch/optim/optimizer.py:405)", IMPORT,
                      "<module> (/v/lib/python3.12/site-packages/torch/_dynamo/__init__.py:13)", IMPORT,
                      "<module> (/v/lib/python3.12/site-packages/sympy/__init__.py:77)"])
    assert bench.part_of(stack) == "imports: torch"
    gate = ";".join([SERVER, "run_sanity_checks (components/steps/sanity_checks/gate.py:83)",
                     "optimizer_step (components/engine/step.py:70)"])
    assert bench.part_of(gate) == "sanity gate: compute"


def test_the_standbys_imports_are_their_own_part():
    stack = ";".join(['process 3:"python -I components/lib/warm_start/standby.py s.sock --idle torch"',
                      "_preload (components/lib/warm_start/standby.py:17)", IMPORT,
                      "<module> (/v/site-packages/mlflow/__init__.py:1)"])
    assert bench.part_of(stack).startswith("standby: imports")


def test_a_command_line_over_several_lines_is_one_stack_and_shares_add_up(tmp_path):
    raw = tmp_path / "raw.txt"
    raw.write_text('process 1:"sh -ec program\nprintf x";run_sanity_checks (gate.py:1) 30\n'
                   f"{SERVER};train (components/steps/train/worker.py:9) 70\n")
    counts = bench.read_collapsed(raw)
    assert sum(counts.values()) == 100 and len(counts) == 2
    result = bench.summarise(counts, rate=50)
    assert result["cpu_seconds"] == 2.0
    assert result["parts"] == {"training ranks: compute": 0.7, "sanity gate: compute": 0.3}
