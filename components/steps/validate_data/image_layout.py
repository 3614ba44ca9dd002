"""Image orientation per partition: a writer that stores some images transposed (column-major) or flipped.

No orientation-blind statistic (the mean pixel, the ink fraction, the decode check) changes when half of a
partition's images are written column-major: a model learns both layouts at a cost (0.964 against 0.990), and
serving then depends on the writer. The task's layout profile does (``image_columns.layout_profile``: each
image's mean pixel per band of rows, ``IMAGE__row_I``, and of columns, ``IMAGE__col_J``, among its drift
columns). Each image's profile is normalised to sum 1 (brightness drift cancels), and each partition's mean
profile P is compared with the other partitions' (and with the champion's reference means, when the reference
has them) as a mixture: P ≈ (1 - f) R + f T(R) for each layout change T (a transposition, when as many row as
column bands; a vertical and a horizontal flip), where f is the share of the partition's images written so. f is
estimated row by row (each image's projection on T(R) - R), with its standard error, and a partition fails when
f's one-sided lower bound, Bonferroni-corrected over the partitions and changes tested at ``P_VALUE``, is above
``MIN_SHARE`` and the change explains at least ``MIN_EXPLAINED`` of the profile's difference (a content shift, a
new mix of digits, moves the profile in other directions). A change that leaves R (nearly) unchanged — a
symmetric profile — cannot be seen and is not judged.

Input: the per-row profile frame (the task's drift columns) and each row's partition; the reference as
``{column: mean}``. A plain function of pandas and numpy (issue 42 ports it).
"""

from __future__ import annotations

import re
from statistics import NormalDist

import numpy as np
import pandas as pd

from ctpipe.components.steps.validate_data.findings import ERROR, Finding

PROFILE_COLUMN = re.compile(r"(?P<image>.+)__(?P<axis>row|col)_(?P<band>\d+)")
P_VALUE = 0.001
MIN_SHARE = 0.1
MIN_EXPLAINED = 0.5
MIN_ROWS = 30
# A change T is judged only when it moves the reference profile by this much (L2, on profiles summing to 1).
MIN_CHANGE = 0.02


def layout_columns(columns: pd.Index) -> dict[str, tuple[list[str], list[str]]]:
    """image column -> (its row band columns, its column band columns), in band order."""
    found: dict[str, dict[str, dict[int, str]]] = {}
    for name in map(str, columns):
        match = PROFILE_COLUMN.fullmatch(name)
        if match:
            found.setdefault(match["image"], {"row": {}, "col": {}})[match["axis"]][int(match["band"])] = name
    return {image: ([axes["row"][i] for i in sorted(axes["row"])], [axes["col"][i] for i in sorted(axes["col"])])
            for image, axes in found.items() if axes["row"] and axes["col"]}


def _changes(rows: int, cols: int) -> dict[str, np.ndarray]:
    """Each layout change as a permutation of the profile vector [row bands | column bands]."""
    r, c = np.arange(rows), rows + np.arange(cols)
    out = {"flipped upside down (rows in reverse order)": np.concatenate([r[::-1], c]),
           "mirrored (columns in reverse order)": np.concatenate([r, c[::-1]])}
    if rows == cols:
        out["transposed (written column-major: rows stored as columns)"] = np.concatenate([c, r])
    return out


def _normalised(values: np.ndarray) -> np.ndarray:
    """Each row divided by its sum; rows that are blank or do not decode are dropped."""
    total = values.sum(axis=1)
    keep = np.isfinite(total) & (total > 0)
    return values[keep] / total[keep, None]


def _judge(part: np.ndarray, reference: np.ndarray, reference_rows: np.ndarray | None, perm: np.ndarray,
           z: float) -> tuple[float, float, float] | None:
    """(share f, its lower bound, share of the difference explained) of the partition's rows ``part`` as a
    mixture of ``reference`` and its change ``perm``; None when the change barely moves the reference."""
    delta = reference[perm] - reference
    norm2 = float(delta @ delta)
    if np.sqrt(norm2) < MIN_CHANGE:
        return None
    per_row = (part - reference) @ delta / norm2
    share = float(per_row.mean())
    var = per_row.var(ddof=1) / len(per_row)
    if reference_rows is not None:  # the reference mean's own noise
        var += ((reference_rows - reference) @ delta / norm2).var(ddof=1) / len(reference_rows)
    diff = part.mean(axis=0) - reference
    explained = 1.0 - float(np.sum((diff - share * delta) ** 2)) / max(float(diff @ diff), 1e-300)
    return share, share - z * float(np.sqrt(var)), explained


def check_image_layout(profiles: pd.DataFrame, partitions: pd.Series,
                       reference_means: dict[str, float] | None = None) -> list[Finding]:
    """Each partition's images against the other partitions' (and the reference's) layout: errors naming the
    partition, the image column, the change and the share of its images written so."""
    findings: list[Finding] = []
    where = partitions.astype(str).to_numpy()
    names = sorted(set(where))
    for image, (row_cols, col_cols) in layout_columns(profiles.columns).items():
        columns = row_cols + col_cols
        values = profiles[columns].to_numpy(dtype="float64")
        changes = _changes(len(row_cols), len(col_cols))
        ref = None
        if reference_means and all(reference_means.get(c) is not None for c in columns):
            ref = np.array([reference_means[c] for c in columns], dtype="float64")
            ref = ref / ref.sum() if ref.sum() > 0 else None
        against = (["the other partitions"] if len(names) > 1 else []) + (["the champion's reference"] if ref is not None else [])
        z = NormalDist().inv_cdf(1 - P_VALUE / max(len(names) * len(changes) * len(against), 1))
        failed = []
        for name in names:
            part = _normalised(values[where == name])
            others = _normalised(values[where != name])
            if len(part) < MIN_ROWS:
                continue
            bases = []
            if len(others) >= MIN_ROWS:
                bases.append(("the other partitions", others.mean(axis=0), others))
            if ref is not None:
                bases.append(("the champion's reference", ref, None))
            for basis, mean, rows in bases:
                for change, perm in changes.items():
                    judged = _judge(part, mean, rows, perm, z)
                    if judged and judged[1] > MIN_SHARE and judged[2] >= MIN_EXPLAINED:
                        failed.append((name, basis, change, *judged, len(part)))
        for name, basis, change, share, lower, explained, rows in failed:
            findings.append(Finding(
                check="image_layout", passed=False, severity=ERROR, column=image,
                message=(f"image column '{image}' in partition '{name}': about {min(share, 1.0):.0%} of its {rows} images "
                         f"look {change} against {basis} (share {share:.2f}, one-sided lower bound {lower:.2f} at "
                         f"p {P_VALUE:g} over the partitions; the change explains {explained:.0%} of how its row and "
                         "column profile differs). Images of one column must share one layout: a model learns both at "
                         "a cost, and serving depends on the writer; fix the export of that partition"),
                observed=f"{share:.0%} of images {change.split(' (')[0]}", expected=f"<= {MIN_SHARE:.0%}"))
        if not failed:
            findings.append(Finding(
                check="image_layout", passed=True, severity=ERROR, column=image,
                message=(f"image column '{image}': every partition's row and column profile matches "
                         f"{' and '.join(against) or 'itself (one partition, no reference)'}"),
                observed=f"{len(names)} partition(s)", expected=f"<= {MIN_SHARE:.0%} of images flipped or transposed"))
    return findings
