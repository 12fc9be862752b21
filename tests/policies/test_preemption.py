"""Preemption victim policies: exact victims on hand-written running sets."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from policies.preemption import VICTIMS
from sim.workload.request import Request


@dataclass
class View:
    now: float = 50.0
    blocks: dict[int, int] = field(default_factory=dict)  # req_id -> blocks held
    generated: dict[int, int] = field(default_factory=dict)  # req_id -> tokens

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
    return VICTIMS.get(name)().pick(running, view or View()).req_id


def test_every_victim_policy_is_registered():
    expected = {"last-arrived", "lowest-priority", "most-blocks", "fewest-generated"}
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
