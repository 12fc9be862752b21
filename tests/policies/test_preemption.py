"""Preemption victim policies: exact victims on hand-written running sets."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from policies.context import SLO, PolicyContext, build_policy
from policies.preemption import MODES, VICTIMS
from sim.workload.request import Request


@dataclass
class View:
    now: float = 50.0
    blocks: dict[int, int] = field(default_factory=dict)  # req_id -> blocks held
    generated: dict[int, int] = field(default_factory=dict)  # req_id -> tokens
    first_token: dict[int, float] = field(default_factory=dict)  # req_id -> seconds

    def first_token_s(self, request):
        return self.first_token.get(request.req_id, float("nan"))

    def blocks_held(self, request):
        return self.blocks[request.req_id]

    def generated_tokens(self, request):
        return self.generated[request.req_id]


def req(req_id, arrival_s, priority=0):
    prompt = np.zeros(4, dtype=np.int32)
    return Request(
        req_id=req_id, arrival_s=arrival_s, prompt=prompt, output_len=4, priority=priority
    )


def pick(name, running, view=None):
    context = PolicyContext.standalone(slo=SLO(ttft_s=2.0, tpot_s=0.1))
    return build_policy(VICTIMS, name, {}, context).pick(running, view or View()).req_id


def test_every_victim_policy_is_registered():
    expected = {"last-arrived", "lowest-priority", "most-blocks", "fewest-generated", "slo-aware"}
    assert expected <= set(VICTIMS.names())


def test_last_arrived_ties_by_higher_id():
    running = [req(0, 1.0), req(2, 3.0), req(1, 3.0)]
    assert pick("last-arrived", running) == 2


def test_lowest_priority_then_last_arrived():
    running = [
        req(0, 0.0, priority=1),
        req(1, 1.0, priority=0),
        req(2, 2.0, priority=0),
        req(3, 3.0, priority=2),
    ]
    assert pick("lowest-priority", running) == 2
    running[2] = req(2, 2.0, priority=5)
    assert pick("lowest-priority", running) == 1


def test_most_blocks_then_last_arrived():
    running = [req(0, 0.0), req(1, 1.0), req(2, 2.0)]
    view = View(blocks={0: 7, 1: 7, 2: 3})
    assert pick("most-blocks", running, view) == 1
    view.blocks[2] = 9
    assert pick("most-blocks", running, view) == 2


def test_fewest_generated_then_last_arrived():
    running = [req(0, 0.0), req(1, 1.0), req(2, 2.0)]
    view = View(generated={0: 0, 1: 5, 2: 0})
    assert pick("fewest-generated", running, view) == 2
    view.generated[2] = 6
    assert pick("fewest-generated", running, view) == 0


@pytest.mark.parametrize(
    "name", ["last-arrived", "lowest-priority", "most-blocks", "fewest-generated"]
)
def test_the_victim_does_not_depend_on_the_running_order(name):
    running = [req(i, float(i % 3), priority=i % 2) for i in range(6)]
    view = View(blocks={i: 4 for i in range(6)}, generated={i: 1 for i in range(6)})
    assert pick(name, running, view) == pick(name, list(reversed(running)), view)


def test_slo_aware_picks_the_request_with_the_most_slack():
    # now = 50; TTFT SLO 2 s, TPOT SLO 0.1 s.
    running = [
        req(0, 49.5),  # no token yet: due 51.5, slack 1.5
        req(1, 40.0),  # first token at 41, 80 tokens: next due 41 + 8 = 49 (late)
        req(2, 45.0),  # first token at 46, 60 tokens: next due 52, slack 2.0
        req(3, 48.8),  # no token yet: due 50.8, slack 0.8
    ]
    view = View(generated={1: 80, 2: 60}, first_token={1: 41.0, 2: 46.0})
    assert pick("slo-aware", running, view) == 2
    view.generated[2] = 30  # next due 49: now the fresh request 0 can wait longest
    assert pick("slo-aware", running, view) == 0


def test_preemption_modes_say_whether_to_swap():
    assert MODES.get("swap")().swap(req(0, 0.0), View()) is True
    assert MODES.get("recompute")().swap(req(0, 0.0), View()) is False
