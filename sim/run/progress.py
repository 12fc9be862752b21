"""A dependency-free progress bar for long runs (written to stderr, never to outputs)."""

from __future__ import annotations

import sys
import time


class Progress:
    """Redraws at most every ``INTERVAL_S`` wall seconds; silent when disabled or when
    stderr is not a terminal (a log file gets no carriage-return noise)."""

    INTERVAL_S = 0.5

    def __init__(self, total: int, label: str, *, enabled: bool = True):
        self.total = max(total, 1)
        self.label = label
        self.stream = sys.stderr
        self.enabled = enabled and self.stream.isatty()
        self._last = 0.0
        self._start = time.perf_counter()

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self._last < self.INTERVAL_S and done < self.total:
            return
        self._last = now
        frac = min(done / self.total, 1.0)
        bar = "#" * int(frac * 30)
        rate = done / max(now - self._start, 1e-9)
        self.stream.write(
            f"\r{self.label} [{bar:<30}] {done}/{self.total} ({frac:5.1%}, {rate:,.0f}/s)"
        )
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
