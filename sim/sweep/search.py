"""The highest arrival rate that passes a test, by bracketing and then bisection, with
``k`` probes per round (so ``k`` workers are all busy).

* **Bracketing.** Until some rate fails, a round tries ``k`` rates growing by
  :data:`GROWTH` from the highest that passed (from the start rate at first); until
  some rate passes, ``k`` rates shrinking by the same factor from the lowest that failed.
* **Bisection.** With ``lo`` (highest pass) < ``hi`` (lowest fail), a round tries ``k``
  rates splitting ``[lo, hi]`` into ``k + 1`` equal parts: the bracket shrinks ``k + 1``
  times per round (``k = 1`` is plain bisection).
* **Stop** when ``hi - lo <= tolerance x hi``; the capacity is ``lo``. Also when no rate
  down to :data:`MIN_RATE` passes (capacity 0), or every rate up to :data:`MAX_RATE` does.

The test is assumed to get harder as the rate grows. Noise can break that near the
edge: ``hi`` is the lowest rate that failed, and a pass above it does not move ``lo``
(a lucky pass above a failure is not trusted). Rates are rounded to four significant
figures so that a probe's scenario, and so its run folder, is the same whenever the
search passes that way (a resumed search finds its probes already done).
"""

from __future__ import annotations

import math

#: Factor between bracketing probes.
GROWTH = 2.0

#: Below this rate (req/s), a search that found no passing rate gives up: capacity 0.
MIN_RATE = 1e-3

#: Above this rate, a search that found no failing rate gives up: unbounded.
MAX_RATE = 1e7


def round_rate(rate: float) -> float:
    """``rate`` to four significant figures."""
    return float(f"{rate:.4g}")


class RateSearch:
    """The state of one search; ``next_rates(k)`` then ``record(rate, passed)`` for each."""

    def __init__(self, start: float, tolerance: float):
        if not start > 0 or not 0 < tolerance < 1:
            raise ValueError("start must be > 0 and tolerance in (0, 1)")
        self.start = round_rate(start)
        self.tolerance = tolerance
        self.results: dict[float, bool] = {}

    @property
    def hi(self) -> float | None:
        """The lowest rate that failed."""
        failed = [r for r, ok in self.results.items() if not ok]
        return min(failed) if failed else None

    @property
    def lo(self) -> float | None:
        """The highest rate that passed below every failure."""
        hi = self.hi
        passed = [r for r, ok in self.results.items() if ok and (hi is None or r < hi)]
        return max(passed) if passed else None

    def done(self) -> bool:
        lo, hi = self.lo, self.hi
        if lo is not None and hi is not None:
            return hi - lo <= self.tolerance * hi or not self._interior(lo, hi, 1)
        if lo is None and hi is not None:
            return hi <= MIN_RATE
        return lo is not None and lo >= MAX_RATE

    def next_rates(self, k: int) -> list[float]:
        """Up to ``k`` new rates to try this round (none when done)."""
        if self.done():
            return []
        lo, hi = self.lo, self.hi
        if lo is not None and hi is not None:
            rates = self._interior(lo, hi, k)
        elif hi is None:
            first = self.start if lo is None else lo * GROWTH
            rates = [round_rate(first * GROWTH**i) for i in range(k)]
        else:
            rates = [round_rate(hi / GROWTH ** (i + 1)) for i in range(k)]
        fresh = [r for r in dict.fromkeys(rates) if r not in self.results and r > 0]
        return fresh

    def _interior(self, lo: float, hi: float, k: int) -> list[float]:
        rates = (round_rate(lo + (hi - lo) * j / (k + 1)) for j in range(1, k + 1))
        return [r for r in dict.fromkeys(rates) if lo < r < hi and r not in self.results]

    def record(self, rate: float, passed: bool) -> None:
        self.results[rate] = passed

    def capacity(self) -> float:
        """The highest rate known to pass (0 when none did)."""
        return self.lo or 0.0

    def status(self) -> str:
        """How the search ended: converged, none (no rate passes), unbounded."""
        lo, hi = self.lo, self.hi
        if lo is None:
            return "none"
        if hi is None:
            return "unbounded"
        return "converged" if self.done() else "stopped"

    def rounds_bound(self, k: int) -> int:
        """A generous bound on the rounds left (for a progress estimate)."""
        lo, hi = self.lo, self.hi
        if lo is None or hi is None:
            return 1 + math.ceil(math.log(1 / self.tolerance, k + 1))
        return max(0, math.ceil(math.log((hi - lo) / (self.tolerance * hi), k + 1)))
