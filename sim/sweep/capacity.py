"""``pagesim capacity``: for each configuration (the scenario with ``--vary`` values), the
highest arrival rate (``workload.arrival.rate_rps``) that meets the SLO, found by
bracketing and bisection (sim.sweep.search) to a stated tolerance; and, where the GPU has
a list price (sim.catalog.prices), the cost per million output tokens at that rate, with
the cheapest configuration that meets the SLO marked.

Each probe is a full run (a run too short to judge is run again, longer: sim.sweep.task),
stored in ``runs/<hash>`` like a sweep's points, so a search that is interrupted and run
again finds the probes it already ran. A round's probes (of every configuration still
searching) run side by side: with ``k`` workers and ``c`` configurations searching,
each tries ``max(1, k // c)`` rates per round.
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.catalog.prices import Price, cost_per_million_tokens, gpu_price
from sim.config.errors import ScenarioError
from sim.config.loader import _read_yaml
from sim.sweep.points import Point, resolve_point
from sim.sweep.search import RateSearch
from sim.sweep.slo import Bound, default_bounds, meets
from sim.sweep.spec import describe
from sim.sweep.store import run_points

#: The field a capacity search varies.
RATE_KEY = "workload.arrival.rate_rps"

#: Most rounds of one search (bracketing from 1e-3 to 1e7 req/s and bisecting to 0.1 %
#: takes about 35 at one probe per round).
MAX_ROUNDS = 60


@dataclass
class Probe:
    """One run of a search: its rate, its point, and what it showed."""

    rate: float
    point: Point
    passed: bool = False
    summary: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class Config:
    """One configuration and its search."""

    index: int
    values: dict[str, Any]
    scenario: Any
    bounds: list[Bound]
    search: RateSearch
    probes: list[Probe] = field(default_factory=list)
    #: why a probe of it could not run (its search stops there: an error does not
    #: depend on the rate the way an SLO miss does)
    error: str | None = None

    def describe(self) -> str:
        return describe(self.values)

    def at_capacity(self) -> Probe | None:
        """The probe at the capacity (the highest passing rate), or None."""
        rate = self.search.lo
        return next((p for p in self.probes if p.rate == rate), None)

    def gpus(self) -> int:
        """Every GPU the configuration runs (both pools' with prefill and decode pools)."""
        return sum(count for _, count in self.scenario.gpu_groups())

    def price(self, prices: dict[str, float] | None) -> tuple[str, Price | None]:
        """The configuration's hardware name(s) and its price per GPU-hour: the mean over
        its GPUs where pools run different ones (None: a GPU without a price)."""
        groups = self.scenario.gpu_groups()
        names = list(dict.fromkeys(name for name, _ in groups))
        found = [gpu_price(name, prices) for name in names]
        if None in found:
            return "+".join(names), None
        if len(found) == 1:
            return names[0], found[0]
        by_name = dict(zip(names, found, strict=True))
        spend = sum(by_name[name].usd_per_gpu_hour * count for name, count in groups)
        sources = "; ".join(dict.fromkeys(p.source for p in found))
        return "+".join(names), Price(spend / self.gpus(), sources)


class CapacityPlan:
    """The configurations of one ``pagesim capacity``, validated up front."""

    def __init__(
        self,
        base: Path,
        common: Sequence[str],
        vary: Sequence[tuple[str, list]],
        bounds: Sequence[Bound] | None,
        tolerance: float,
    ):
        self.base = base
        self.common = list(common)
        self.vary = list(vary)
        self.tolerance = tolerance
        self.base_raw = _read_yaml(base, str(base))
        self._probe_index = itertools.count()
        self.configs = [
            self._config(i, dict(zip([k for k, _ in vary], combo)), bounds)
            for i, combo in enumerate(itertools.product(*(values for _, values in vary)))
        ]

    def _config(self, index: int, values: dict[str, Any], bounds) -> Config:
        point = resolve_point(
            index, self.base_raw, self.base, values, None, self.common, where="--vary"
        )
        scenario = point.scenario
        rate = getattr(scenario.workload.arrival, "rate_rps", None)
        if rate is None:
            kind = scenario.workload.arrival.kind
            raise ScenarioError(
                f"{self.base}: workload.arrival: a capacity search varies "
                f"rate_rps; a {kind} arrival has none"
            )
        chosen = list(bounds) if bounds else default_bounds(scenario)
        return Config(index, values, scenario, chosen, RateSearch(rate, self.tolerance))

    def probe(self, config: Config, rate: float) -> Probe:
        point = resolve_point(
            next(self._probe_index),
            self.base_raw,
            self.base,
            {**config.values, RATE_KEY: rate},
            None,
            self.common,
            where=f"configuration {config.index}",
        )
        return Probe(rate, point)

    def resolved(self) -> dict[str, Any]:
        return {
            "scenario": str(self.base),
            "set": self.common,
            "vary": {k: v for k, v in self.vary},
            "tolerance": self.tolerance,
            "rate_key": RATE_KEY,
            # each configuration's SLO (the default one follows its scenario)
            "slo": [[b.text() for b in config.bounds] for config in self.configs],
        }


def run_capacity(
    plan: CapacityPlan, out: Path, executor, *, html: bool = False, progress: bool = True
) -> None:
    """Search every configuration of ``plan``, writing probe run folders under ``out``."""
    started = time.monotonic()
    for round_number in range(1, MAX_ROUNDS + 1):
        active = [c for c in plan.configs if not c.search.done() and c.error is None]
        if not active:
            return
        per_config = max(1, executor.workers // len(active))
        probes: list[tuple[Config, Probe]] = []
        for config in active:
            for rate in config.search.next_rates(per_config):
                probes.append((config, plan.probe(config, rate)))
        if not probes:
            return
        outcomes = run_points(
            [p.point for _, p in probes], out, executor, html=html, extend=True, progress=False
        )
        for config, probe in probes:
            probe.summary, probe.error = outcomes[probe.point.key]
            probe.passed = probe.error is None and meets(config.bounds, probe.summary)
            config.probes.append(probe)
            if probe.error is not None:
                config.error = config.error or f"the probe at {probe.rate:g} req/s: {probe.error}"
                continue
            config.search.record(probe.rate, probe.passed)
        if progress:
            elapsed = time.monotonic() - started
            print(
                f"capacity: round {round_number}: {len(probes)} probes; "
                + "; ".join(_state(c) for c in plan.configs)
                + _eta(plan, executor.workers, elapsed / round_number),
                file=sys.stderr,
            )


def _eta(plan: CapacityPlan, workers: int, seconds_per_round: float) -> str:
    """'; about N rounds left (T)': the searches' bound on the rounds left (a search still
    bracketing counts one round for it), at the mean round's wall time so far."""
    active = [c for c in plan.configs if not c.search.done() and c.error is None]
    if not active:
        return ""
    per_config = max(1, workers // len(active))
    left = max(c.search.rounds_bound(per_config) for c in active)
    rounds = "1 round" if left == 1 else f"{left} rounds"
    return f"; about {rounds} left ({_duration(left * seconds_per_round)})"


def _duration(seconds: float) -> str:
    if seconds < 1:
        return "under 1 s"
    if seconds < 90:  # (a bound, so no more precision than this)
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _state(config: Config) -> str:
    lo, hi = config.search.lo, config.search.hi
    bracket = f"[{lo if lo is not None else 0:g}, {hi if hi is not None else math.inf:g}]"
    return f"#{config.index} {bracket}{' done' if config.search.done() else ''}"


def results(plan: CapacityPlan, prices: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """One row per configuration: its capacity, bracket, the figures at capacity, GPUs,
    price and cost per million output tokens, and whether it is the cheapest."""
    rows = []
    for config in plan.configs:
        at = config.at_capacity()
        steady = (at.summary or {}).get("steady_state", {}) if at else {}
        tokens = steady.get("throughput_tok_s") if at else None
        hardware, price = config.price(prices)
        rows.append(
            {
                "config": config.index,
                **{key: value for key, value in config.values.items()},
                # a failed search has no capacity: never 0, which would read as a finding
                "capacity_rps": None if config.error else config.search.capacity(),
                "status": "failed" if config.error else config.search.status(),
                "error": config.error or "",
                "lowest_failing_rps": config.search.hi,
                "tolerance": plan.tolerance,
                "probes": len(config.probes),
                "slo": "; ".join(b.text() for b in config.bounds),
                **{
                    f"{b.metric}_at_capacity": (b.value(at.summary) if at else None)
                    for b in config.bounds
                },
                "throughput_tok_s_at_capacity": tokens,
                "hardware": hardware,
                "gpus": config.gpus(),
                "usd_per_gpu_hour": price.usd_per_gpu_hour if price else None,
                "usd_per_million_output_tokens": cost_per_million_tokens(
                    price, config.gpus(), tokens
                ),
                "price_source": price.source if price else "",
                "cheapest": False,
            }
        )
    priced = [
        r
        for r in rows
        if (r["capacity_rps"] or 0) > 0 and r["usd_per_million_output_tokens"] is not None
    ]
    if priced:
        min(priced, key=lambda r: r["usd_per_million_output_tokens"])["cheapest"] = True
    return rows


def probe_rows(plan: CapacityPlan) -> list[dict[str, Any]]:
    """One row per probe, in the order they ran."""
    rows = []
    for config in plan.configs:
        for probe in config.probes:
            steady = (probe.summary or {}).get("steady_state", {})
            rows.append(
                {
                    "config": config.index,
                    "rate_rps": probe.rate,
                    "passed": probe.passed,
                    "verdict": steady.get("verdict", ""),
                    **{
                        b.metric: (b.value(probe.summary) if probe.summary else None)
                        for b in config.bounds
                    },
                    "throughput_tok_s": steady.get("throughput_tok_s"),
                    "num_requests": (probe.summary or {}).get("num_requests"),
                    "run": probe.point.folder if probe.error is None else "",
                    "error": probe.error or "",
                }
            )
    return rows
