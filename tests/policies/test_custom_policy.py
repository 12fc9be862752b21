"""The README's example plug-in (scenarios/policies/custom_policy.py), tested the way a
user tests their own policy: built by build_policy, fed a hand-made queue and view."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from policies.context import SLO, PolicyContext, build_policy
from policies.registry import Registry
from sim.workload.request import Request

MINE: Registry = Registry("scheduler")


@dataclass(frozen=True)
class Entry:
    request: Request
    resumed: bool = False


@dataclass(frozen=True)
class View:
    now: float


def entry(req_id, arrival_s, tenant, resumed=False):
    request = Request(req_id, arrival_s, np.zeros(8, np.int32), output_len=4, tenant=tenant)
    return Entry(request, resumed)


def test_premium_requests_in_time_go_first():
    name = "scenarios/policies/custom_policy.py:PremiumTenantsFirst"
    context = PolicyContext.standalone(slo=SLO(ttft_s=1.0, tpot_s=0.1))
    policy = build_policy(MINE, name, {"premium_tenants": [0]}, context)
    waiting = [
        entry(0, 0.0, tenant=1),
        entry(1, 0.5, tenant=0),  # premium, but at t=2 its deadline (1.5) has passed
        entry(2, 1.5, tenant=0),  # premium and in time
        entry(3, 1.0, tenant=2, resumed=True),  # resumed requests keep the front
    ]
    order = [e.request.req_id for e in policy.order(waiting, View(now=2.0))]
    assert order == [3, 2, 0, 1]
