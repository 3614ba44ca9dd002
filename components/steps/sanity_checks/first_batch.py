"""The first-batch round-trip check of the sanity gate: the task's dump of its first batch decodes back to the raw rows.

The dump and the comparison are the task's (``Task.describe_batch``, ``Task.batch_mismatches``; the tabular
task's in ``components/tasks/tabular_first_batch.py``); this module turns the mismatches into a check result.
"""

from __future__ import annotations

from typing import Any

from ctpipe.components.tasks.protocol import CheckResult


def check_first_batch_roundtrip(dump: dict[str, Any], mismatches: list[str]) -> CheckResult:
    """The first batch's tensors decode back to the raw rows (the task's ``batch_mismatches`` found none)."""
    ok = not mismatches
    return CheckResult(
        "first_batch_roundtrip", ok, float(len(mismatches)), "0 mismatches",
        f"{len(dump['rows'])} first-batch rows decoded back to column values; {len(mismatches)} mismatch(es)"
        + ("" if ok else f": {'; '.join(mismatches[:3])}: the encoding does not match the data"))
