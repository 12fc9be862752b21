"""Every shipped example scenario, run as shipped, reaches a verdict (stable or
overloaded): an example that ends "too short" teaches a reader nothing about the
deployment it describes. Each verdict's reason names its figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.config.loader import load_scenario
from sim.run.runner import simulate

REPO = Path(__file__).resolve().parents[3]
SHIPPED = sorted(p for p in (REPO / "scenarios").rglob("*.yaml") if p.parent.name != "sweeps")

#: Shipped scenarios that are not examples of a deployment, with why.
NOT_EXAMPLES = {
    # the real backend's own check: `pagesim validate` measures each step it runs (its
    # per-step error is the point), so it stays short enough to run in half a minute
    "validation.yaml",
}


@pytest.mark.parametrize(
    "path",
    [p for p in SHIPPED if p.relative_to(REPO / "scenarios").as_posix() not in NOT_EXAMPLES],
    ids=lambda p: p.relative_to(REPO / "scenarios").as_posix(),
)
def test_a_shipped_example_reaches_a_verdict(path):
    window = simulate(load_scenario(path)).summary["steady_state"]
    assert window["verdict"] in ("stable", "overloaded"), window["reason"]
    assert "req/s arrive" in window["reason"]  # it says what it rests on


def test_the_exceptions_are_shipped():
    shipped = {p.relative_to(REPO / "scenarios").as_posix() for p in SHIPPED}
    assert shipped >= NOT_EXAMPLES
