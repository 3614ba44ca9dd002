"""The interval the training checks are judged by: a paired per-row loss difference with one-sided bounds."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist


@dataclass
class PairedGain:
    """Mean per-row loss difference (baseline - model), its confidence bounds, relative to the baseline's loss."""

    mean: float
    half_width: float
    reference_loss: float
    rows: int

    def _relative(self, value: float) -> float:
        return value / self.reference_loss if self.reference_loss > 0 and math.isfinite(value) else float("nan")

    @property
    def relative(self) -> float:
        return self._relative(self.mean)

    @property
    def lower(self) -> float:
        return self._relative(self.mean - self.half_width)

    @property
    def upper(self) -> float:
        return self._relative(self.mean + self.half_width)

    def verdict(self, margin: float, useful: float | None = None) -> str:
        """pass: the interval lies above ``margin``; fail: at or below it; no_signal: below ``useful`` (the smallest
        useful gain: an equivalence test, the gain is shown to be too small to matter); inconclusive: otherwise."""
        if not (math.isfinite(self.upper) and math.isfinite(self.lower)) or self.upper <= margin:
            return "fail"
        if self.lower > margin:
            return "pass"
        return "no_signal" if useful is not None and self.upper < useful else "inconclusive"


def paired_gain(reference_rows, model_rows, confidence: float) -> PairedGain:
    """How much lower ``model_rows`` are than ``reference_rows``, row by row, with one-sided bounds at ``confidence``.

    The rows are independent draws, so the mean difference is normal to a good approximation
    (central limit theorem, hundreds of rows): bounds mean -/+ z * sd / sqrt(n).
    """
    diff = (reference_rows - model_rows).double()
    n = len(diff)
    mean = float(diff.mean()) if n else float("nan")
    sd = float(diff.std()) if n > 1 else float("nan")
    half_width = NormalDist().inv_cdf(confidence) * sd / math.sqrt(n) if n > 1 else float("nan")
    return PairedGain(mean, half_width, float(reference_rows.double().mean()) if n else float("nan"), n)
