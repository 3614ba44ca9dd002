"""The label's class shares per partition, against the other partitions and the champion's reference.

Labels corrupted in one partition (one class relabelled as another in the newest day) make that class vanish
there and its neighbour double; the test labels carry the same corruption, so the blessing's accuracy even
rises. The suite's KL expectation judges the whole data root, where one day of many moves it little. Here each
partition's count of each class is compared with the share the class has in the other partitions (and in the
reference suite's label distribution: the champion's training labels, or a reviewed suite's): a binomial test at that
share, at a level Bonferroni-corrected over the partitions and classes tested (``P_VALUE``).

- A class **vanishes** when its share falls to ``VANISH_RATIO`` (a tenth) of the expected share or below, with
  p below that level: an error naming the partition, the class, its count against the expected count, and the
  classes that doubled beside it (the signature of a relabelling). Real drift moves shares, it rarely empties
  a class: the demo's strongest drift takes 'stay' from 49 % to 17 %, a ratio of 0.36.
- A class **doubles** (its share at twice the expected or more, with p below the level): a warning, since a
  prior shift is a reason to retrain (the demo's drift takes 'churn' from 17 % to 60 %).

Input: counts of rows per (partition, class), as a frame indexed by partition with one column per class (exact
from the data, or weighted from the streamed sample), and the reference shares ({class: share}) or None. A
plain function of pandas and scipy (issue 42 computes the counts with one group-by).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ctpipe.components.steps.validate_data.findings import ERROR, WARNING, Finding

VANISH_RATIO = 0.1
DOUBLE_RATIO = 2.0
# Family-wise level over every (partition, class, reference) tested.
P_VALUE = 0.001


def reference_label_shares(suite: dict[str, Any] | None, label: str) -> dict[str, float] | None:
    """The class shares a reference suite's label KL expectation records (the champion's: its training labels)."""
    for exp in (suite or {}).get("expectations", []):
        kw = exp.get("kwargs") or {}
        if exp.get("type") == "expect_column_kl_divergence_to_be_less_than" and kw.get("column") == label:
            part = kw.get("partition_object") or {}
            values, weights = part.get("values") or [], part.get("weights") or []
            if len(values) == len(weights) and values:
                return {str(v): float(w) for v, w in zip(values, weights, strict=True)}
    return None


def _tests(counts: pd.DataFrame, reference: dict[str, float] | None) -> list[tuple[str, str, str, int, int, float]]:
    """(partition, class, against, count, rows, expected share) for every share that can be judged."""
    out = []
    totals = counts.sum(axis=0)
    for partition, row in counts.iterrows():
        n = int(row.sum())
        if n == 0:
            continue
        rest = totals - row
        against = []
        if len(counts) > 1 and rest.sum() > 0:
            against.append(("the other partitions", rest / rest.sum()))
        if reference:
            against.append(("the reference suite's label shares", pd.Series(reference).reindex(counts.columns).fillna(0.0)))
        for name, shares in against:
            for cls in counts.columns:
                q = float(shares.get(cls, 0.0))
                if q > 0:
                    out.append((str(partition), str(cls), name, int(row[cls]), n, q))
    return out


def check_label_shares(counts: pd.DataFrame, reference: dict[str, float] | None, label: str) -> list[Finding]:
    """Each partition's class shares against the other partitions' (and ``reference``): vanished classes are
    errors, doubled ones warnings; one passed finding when no share moved that far."""
    from scipy import stats

    tests = _tests(counts, reference)
    level = P_VALUE / max(len(tests), 1)
    vanished: dict[tuple[str, str], list[str]] = {}
    doubled: dict[tuple[str, str], list[str]] = {}
    for partition, cls, against, k, n, q in tests:
        share = k / n
        expected = f"'{cls}' {k} of {n} rows ({share:.1%}) where {against} give {q:.1%} ({q * n:.0f} rows)"
        if share <= VANISH_RATIO * q and stats.binom.cdf(k, n, q) < level:
            vanished.setdefault((partition, against), []).append(expected)
        elif share >= DOUBLE_RATIO * q and stats.binom.sf(k - 1, n, q) < level:
            doubled.setdefault((partition, against), []).append(expected)
    findings = []
    for (partition, against), lost in vanished.items():
        grew = doubled.pop((partition, against), [])
        beside = f"; beside it {'; '.join(grew)}" if grew else ""
        findings.append(Finding(
            check="label_shares", passed=False, severity=ERROR, column=label,
            message=(f"label class vanished in partition '{partition}' (vs {against}): {'; '.join(lost)}{beside}. "
                     "A class that empties in one partition while "
                     f"{'another doubles' if grew else 'the others hold'} is usually a relabelling or a filter in that "
                     "partition's export (its test labels carry it too, so the evaluation would not show it); fix the "
                     "export, or drop the partition"),
            observed=f"partition {partition}: {len(lost)} class(es) at <= {VANISH_RATIO:.0%} of their share",
            expected=f"no class below {VANISH_RATIO:.0%} of its share (binomial p >= {level:.2g})"))
    for (partition, against), grew in doubled.items():
        findings.append(Finding(
            check="label_shares", passed=False, severity=WARNING, column=label,
            message=(f"label shares moved in partition '{partition}' (vs {against}): {'; '.join(grew)}: a prior shift "
                     "(a reason to retrain), or a relabelling if another class shrank with it"),
            observed=f"partition {partition}: {len(grew)} class(es) at >= {DOUBLE_RATIO:g}x their share",
            expected=f"shares within {DOUBLE_RATIO:g}x (binomial p >= {level:.2g})"))
    if not findings:
        findings.append(Finding(
            check="label_shares", passed=True, severity=ERROR, column=label,
            message=(f"no label class vanished or doubled in any of {len(counts)} partition(s)" +
                     (" (against the other partitions and the reference suite's label shares)" if reference else "")),
            observed=f"{len(tests)} shares judged", expected="no class vanished or doubled"))
    return findings


def partition_label_counts(labels: pd.Series, partitions: pd.Series, weights: np.ndarray | None = None) -> pd.DataFrame:
    """Rows per partition (index) and class (columns); ``weights``: the rows each (sampled) row stands for."""
    frame = pd.DataFrame({"partition": partitions.to_numpy(), "label": labels.astype(str).to_numpy(),
                          "rows": np.ones(len(labels)) if weights is None else np.asarray(weights, dtype="float64")})
    frame = frame[labels.notna().to_numpy()]
    return frame.pivot_table(index="partition", columns="label", values="rows", aggfunc="sum", fill_value=0).round()
