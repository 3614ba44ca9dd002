"""A long step's progress line, printed to the step's log every few seconds while it works:

    progress validate_data: scanning rows 1200000/5000000 rows, partitions 3/12, 410000.0 rows/s ETA 0:00:09

Training prints its own line each logging window (``components/engine/progress.py``); a step whose work is
counted in rows or files (validation's streaming passes) prints this one through ``WorkMeter``. ``ctpipe run``
shows either on the terminal, in place on a TTY (``pipelines/local/progress.py``); the log keeps plain text.
A step that finishes within one period prints nothing.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

_WORK = re.compile(
    r"progress (?P<step>[\w.-]+): (?P<doing>[^\d]+?) (?P<done>\d+)/(?P<total>\d+) (?P<unit>\S+)"
    r"(?:, (?P<part_unit>\S+) (?P<parts_done>\d+)/(?P<parts_total>\d+))?, "
    r"(?P<rate>[\d.]+) (?P=unit)/s ETA (?P<eta>\d+:\d\d:\d\d)"
)


def clock_text(seconds: float) -> str:
    """``seconds`` as a progress line's ETA, H:MM:SS (training's line writes it the same way)."""
    s = int(round(max(seconds, 0.0)))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def clock_seconds(text: str) -> float:
    """The seconds an H:MM:SS ETA stands for."""
    h, m, s = (int(x) for x in text.split(":"))
    return float(h * 3600 + m * 60 + s)


@dataclass(frozen=True)
class WorkLine:
    """Where a step's counted work stands: what it does, done of total (and of its parts), rate, time left."""

    step: str
    doing: str
    done: int
    total: int
    unit: str
    rate: float
    eta_seconds: float
    parts_done: int | None = None
    parts_total: int | None = None
    part_unit: str = "partitions"

    def text(self) -> str:
        parts = (f", {self.part_unit} {self.parts_done}/{self.parts_total}" if self.parts_total is not None else "")
        return (f"progress {self.step}: {self.doing} {self.done}/{self.total} {self.unit}{parts}, "
                f"{self.rate:.1f} {self.unit}/s ETA {clock_text(self.eta_seconds)}")

    @classmethod
    def parse(cls, line: str) -> WorkLine | None:
        """The progress a log line reports, or None for any other line."""
        match = _WORK.search(line)
        if match is None:
            return None
        parts = match["parts_total"] is not None
        return cls(match["step"], match["doing"], int(match["done"]), int(match["total"]), match["unit"],
                   float(match["rate"]), clock_seconds(match["eta"]),
                   int(match["parts_done"]) if parts else None, int(match["parts_total"]) if parts else None,
                   match["part_unit"] or "partitions")


class WorkMeter:
    """Counts a step's work and prints its ``WorkLine`` once every ``every_seconds`` (and the last one at the end,
    when it printed any): a short pass prints nothing. Parts (partitions) are counted done when the next begins."""

    def __init__(self, step: str, doing: str, total: int, unit: str, *, parts_total: int | None = None,
                 part_unit: str = "partitions", every_seconds: float,
                 out: Callable[[str], None] = lambda text: print(text, flush=True),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.step, self.doing, self.total, self.unit = step, doing, max(int(total), 0), unit
        self.parts_total, self.part_unit = parts_total, part_unit
        self.every, self.out, self.clock = every_seconds, out, clock
        self.done = 0
        self.parts_seen: list[str] = []
        self.started = self.last_printed = clock()
        self.last_done: int | None = None  # done when the last line was printed; None: none printed

    def line(self) -> WorkLine:
        elapsed = max(self.clock() - self.started, 1e-9)
        rate = self.done / elapsed
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        parts_done = None
        if self.parts_total is not None:
            finished = self.total > 0 and self.done >= self.total  # every row counted: every part done
            parts_done = self.parts_total if finished else max(len(self.parts_seen) - 1, 0)
        return WorkLine(self.step, self.doing, self.done, self.total, self.unit, rate, eta,
                        parts_done, self.parts_total, self.part_unit)

    def advance(self, amount: int, part: str | None = None) -> None:
        """``amount`` more units done, in ``part``; print when a period has passed since the last line."""
        self.done = min(self.done + int(amount), self.total)
        if part is not None and (not self.parts_seen or self.parts_seen[-1] != part):
            self.parts_seen.append(part)
        if self.clock() - self.last_printed >= self.every:
            self._print(self.line())

    def finish(self) -> None:
        """The last line (all done), if the pass was long enough to print any and its last line was not that."""
        if self.last_done is not None and self.last_done != self.total:
            self.done = self.total
            self._print(self.line())

    def _print(self, line: WorkLine) -> None:
        self.out(line.text())
        self.last_printed, self.last_done = self.clock(), self.done
