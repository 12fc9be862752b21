"""Policies read the engine through read-only views: what a view offers is the
ReplicaView protocol and nothing that changes the engine, and a policy that tries to
change engine state through it (or through what it returns) fails and changes nothing."""

from __future__ import annotations

import dataclasses

import numpy as np
import simpy

from policies.scheduling import FirstComeFirstServed
from policies.views import ReplicaView
from sim.config.loader import validate_scenario
from sim.engine.replica import Replica
from sim.engine.view import EngineView
from sim.run.build import build_allocator, engine_config, policy_context, replica_policies
from sim.run.runner import simulate
from sim.workload.request import Request
from sim.workload.tokens import SyntheticOutputs

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
    # frozen(): a view for one decision; running_samples(): what `pagesim serve` streams
    assert public(EngineView) == protocol | {"frozen", "running_samples"}


def test_running_samples_count_each_samples_tokens_as_they_come():
    """Every step, each running sample's count is at least what it was, and a request
    is seen with each of its n samples."""
    scenario = validate_scenario(RAW)
    env = simpy.Environment()
    seen: dict[tuple[int, int], list[int]] = {}
    done = []

    class Fixed:
        def execute(self, batch):
            return 0.01

    allocator = build_allocator(scenario)
    context = policy_context(scenario, replica=0)
    holder = {}

    class Steps:  # the step sink: after each step, what each running sample has made
        def record(self, step, end_s=None):
            for req_id, sample, generated in holder["replica"].view.running_samples():
                seen.setdefault((req_id, sample), []).append(generated)

    replica = Replica(
        env,
        0,
        allocator,
        Fixed(),
        replica_policies(scenario, context),
        engine_config(scenario, allocator),
        SyntheticOutputs(0, 512),
        Steps(),
        done.append,
        fast_forward=False,
    )
    holder["replica"] = replica
    replica.submit(Request(0, 0.0, np.arange(10, dtype=np.int32), output_len=5, n=3))
    env.run(until=1.0)
    assert [o.output_tokens for o in done] == [15]
    assert {sample for _, sample in seen} == {0, 1, 2}
    for counts in seen.values():
        assert counts == sorted(counts) and counts[0] >= 1 and counts[-1] <= 5


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
