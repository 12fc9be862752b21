"""Policies read the engine through read-only views: what a view offers is the
ReplicaView protocol and nothing that changes the engine, and a policy that tries to
change engine state through it (or through what it returns) fails and changes nothing."""

from __future__ import annotations

import dataclasses

from policies.scheduling import FirstComeFirstServed
from policies.views import ReplicaView
from sim.config.loader import validate_scenario
from sim.engine.view import EngineView
from sim.run.runner import simulate

RAW = {
    "model": "tiny",
    "cache": {"block_size": 4, "num_blocks": 24},
    "workload": {"arrival": {"kind": "poisson", "rate_rps": 400}, "input": 12, "output": 9},
    "simulation": {"num_requests": 40},
}


def public(obj) -> set[str]:
    return {name for name in dir(obj) if not name.startswith("_")}


def test_the_view_offers_exactly_the_protocol():
    protocol = {name for name in vars(ReplicaView) if not name.startswith("_")}
    assert public(EngineView) == protocol | {"frozen"}  # frozen(): a view for one decision


class Meddler(FirstComeFirstServed):
    """FCFS, but every step it tries to change the engine through what it is given."""

    attempts: list[str] = []
    refused: list[str] = []

    def order(self, waiting, view):
        running = view.running()
        tries = {
            "set now": lambda: setattr(view, "now", 0.0),
            "new attribute": lambda: setattr(view, "notes", []),
            "grow running": lambda: running.append(None),  # a tuple
            "retag request": lambda: setattr(waiting[0].request, "priority", 9),
            "mark resumed": lambda: setattr(waiting[0], "resumed", True),
            "swap entries": lambda: setattr(waiting[0], "request", waiting[-1].request),
        }
        for name, attempt in tries.items():
            Meddler.attempts.append(name)
            try:
                attempt()
            except (AttributeError, TypeError, dataclasses.FrozenInstanceError):
                Meddler.refused.append(name)
        return super().order(waiting, view)


def test_a_policy_cannot_change_the_engine_through_its_view():
    meddled = simulate(validate_scenario({**RAW, "scheduler": {"policy": f"{__name__}:Meddler"}}))
    plain = simulate(validate_scenario(RAW))
    assert Meddler.attempts and Meddler.refused == Meddler.attempts
    same = ("first_token_s", "finish_s", "num_preemptions", "output_tokens")
    for a, b in zip(meddled.outcomes, plain.outcomes, strict=True):
        assert [getattr(a, f) for f in same] == [getattr(b, f) for f in same]
