"""The SLO a capacity search holds a run to: bounds on steady-state metrics, written
``ttft.p99=2s``, ``tpot.p99=100ms``, ``e2e.p50=10``, ``goodput=90%``. Latencies are upper
bounds (seconds, or with an ``s`` / ``ms`` suffix), goodput a lower bound (a share, or a
percentage). The default is the scenario's ``slo`` section: TTFT p99 <= ``slo.ttft_s``
and TPOT p99 <= ``slo.tpot_s``.

A run meets the SLO when its steady-state verdict is not "overloaded" (a queue that
grows without bound misses any latency target given a long enough run, whatever the
figures of this one) and every bound holds over its steady window
(summary.json's ``steady_state``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_LATENCIES = ("ttft", "tpot", "e2e")
_STATS = ("mean", "p50", "p90", "p99")
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|%)?\s*$")


@dataclass(frozen=True)
class Bound:
    """One term: ``metric`` (``ttft.p99``, ``goodput``) at most (latencies) or at least
    (goodput) ``limit`` (seconds, or a share)."""

    metric: str
    limit: float

    @property
    def upper(self) -> bool:
        return self.metric != "goodput"

    def path(self) -> tuple[str, ...]:
        """Where the figure is in summary.json."""
        if self.metric == "goodput":
            return ("steady_state", "goodput")
        name, stat = self.metric.split(".")
        return ("steady_state", f"{name}_s", stat)

    def value(self, summary: Mapping[str, Any]) -> float | None:
        node: Any = summary
        for part in self.path():
            node = node.get(part) if isinstance(node, Mapping) else None
        return float(node) if isinstance(node, (int, float)) else None

    def met(self, summary: Mapping[str, Any]) -> bool:
        value = self.value(summary)
        if value is None or math.isnan(value):
            return False
        return value <= self.limit if self.upper else value >= self.limit

    def text(self) -> str:
        if self.upper:
            return f"{self.metric} <= {self.limit:g} s"
        return f"goodput >= {self.limit:.4g}"


def parse_bound(text: str) -> Bound:
    """``METRIC=LIMIT``; ValueError with a one-line reason."""
    metric, sep, limit = text.partition("=")
    metric = metric.strip().lower()
    names = ["goodput", *(f"{n}.{s}" for n in _LATENCIES for s in _STATS)]
    if not sep or metric not in names:
        raise ValueError(
            f"--slo {text}: expected METRIC=LIMIT with METRIC one of {', '.join(names)}"
        )
    match = _NUMBER.match(limit)
    if match is None:
        raise ValueError(f"--slo {metric}: expected a number (with s, ms or %), got {limit!r}")
    value, unit = float(match[1]), match[2]
    if metric == "goodput":
        if unit in ("s", "ms"):
            raise ValueError(f"--slo goodput: expected a share or a percentage, got {limit!r}")
        value = value / 100 if unit == "%" else value
        if not 0 < value <= 1:
            raise ValueError(
                f"--slo goodput: expected a share in (0, 1] or a percentage, got {limit!r}"
            )
    else:
        if unit == "%":
            raise ValueError(f"--slo {metric}: expected seconds (or ms), got {limit!r}")
        value = value / 1000 if unit == "ms" else value
        if not value > 0:
            raise ValueError(f"--slo {metric}: expected a positive time, got {limit!r}")
    return Bound(metric, value)


def default_bounds(scenario) -> list[Bound]:
    """The scenario's slo section as p99 bounds."""
    return [Bound("ttft.p99", scenario.slo.ttft_s), Bound("tpot.p99", scenario.slo.tpot_s)]


def meets(bounds: Sequence[Bound], summary: Mapping[str, Any]) -> bool:
    """Whether a run with ``summary`` meets every bound (and is not overloaded)."""
    verdict = (summary.get("steady_state") or {}).get("verdict")
    return verdict != "overloaded" and all(b.met(summary) for b in bounds)
