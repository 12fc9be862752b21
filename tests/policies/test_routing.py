"""Routing policies: exact choices on hand-written replica states."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from policies.routing import ROUTERS
from sim.workload.request import Request


@dataclass
class ReplicaView:
    index: int
    outstanding: int = 0
    kv_usage: float = 0.0
    cached: int = 0

    def cached_prefix_tokens(self, request):
        return self.cached


def cluster(*outstanding, usage=None):
    usage = usage or [0.0] * len(outstanding)
    return [ReplicaView(i, o, u) for i, (o, u) in enumerate(zip(outstanding, usage))]


def req(req_id, prompt, tenant=0):
    return Request(
        req_id=req_id,
        arrival_s=0.0,
        prompt=np.asarray(prompt, dtype=np.int32),
        output_len=4,
        tenant=tenant,
    )


def make(name, **params):
    return ROUTERS.get(name)(**params)


def test_every_router_is_registered():
    expected = {
        "round-robin",
        "least-outstanding",
        "least-kv-usage",
        "prefix-affinity",
        "precise-prefix",
    }
    assert expected <= set(ROUTERS.names())


def test_round_robin_cycles():
    router, replicas = make("round-robin"), cluster(0, 0, 0)
    assert [router.route(req(i, [i]), replicas, 0.0) for i in range(5)] == [0, 1, 2, 0, 1]


def test_least_outstanding_lowest_index_on_ties():
    router = make("least-outstanding")
    assert router.route(req(0, [1]), cluster(3, 1, 1), 0.0) == 1
    assert router.route(req(0, [1]), cluster(3, 2, 0), 0.0) == 2


def test_least_kv_usage_then_outstanding():
    router = make("least-kv-usage")
    assert router.route(req(0, [1]), cluster(0, 5, 9, usage=[0.5, 0.1, 0.2]), 0.0) == 1
    assert router.route(req(0, [1]), cluster(4, 2, 9, usage=[0.1, 0.1, 0.2]), 0.0) == 1


def test_prefix_affinity_same_prefix_same_replica():
    router = make("prefix-affinity", prefix_tokens=4)
    replicas = cluster(0, 0, 0, 0)
    shared = [7, 8, 9, 10]
    homes = {router.route(req(i, shared + [100 + i] * i), replicas, 0.0) for i in range(1, 6)}
    assert len(homes) == 1
    # Different first tokens spread over the replicas (the hash is not constant).
    spread = {router.route(req(i, [i, 1, 2, 3]), replicas, 0.0) for i in range(40)}
    assert spread == {0, 1, 2, 3}


def test_prefix_affinity_hash_is_stable_and_salted_by_tenant():
    router = make("prefix-affinity", prefix_tokens=8)
    prompt = list(range(8))
    # Pinned values: a stable digest, not Python's per-process salted hash().
    assert router.home(req(0, prompt), 1000) == router.home(req(1, prompt), 1000) == 970
    assert router.home(req(0, prompt, tenant=1), 1000) == 89
    homes = {router.home(req(0, prompt, tenant=t), 1000) for t in range(8)}
    assert len(homes) > 1


def test_prefix_affinity_falls_back_above_the_load_cap():
    router = make("prefix-affinity", prefix_tokens=4, load_cap=1.5, slack=2)
    request = req(0, [1, 2, 3, 4])
    home = router.home(request, 3)
    other = (home + 1) % 3
    loads = [3, 3, 3]
    loads[home] = 6  # mean 4: cap 1.5 * 4 + 2 = 8 -> still home
    assert router.route(request, cluster(*loads), 0.0) == home
    loads[home], loads[other] = 12, 0  # mean 5: cap 9.5 -> least outstanding
    assert router.route(request, cluster(*loads), 0.0) == other


def test_prefix_affinity_rejects_bad_parameters():
    with pytest.raises(ValueError, match="load_cap"):
        make("prefix-affinity", load_cap=0.5)


def caching(*pairs):
    """Replicas from (outstanding, cached prompt tokens) pairs."""
    return [ReplicaView(i, o, cached=c) for i, (o, c) in enumerate(pairs)]


def test_precise_prefix_goes_where_the_most_is_cached_under_the_load_cap():
    router, request = make("precise-prefix", load_cap=1.5, slack=2), req(0, [1, 2, 3])
    assert router.route(request, caching((3, 32), (3, 64), (3, 16)), 0.0) == 1
    assert router.route(request, caching((5, 64), (2, 64), (3, 0)), 0.0) == 1  # fewer queued
    # mean 5: cap 9.5; the replica holding the most is over it, the next best takes it
    assert router.route(request, caching((10, 64), (2, 32), (3, 0)), 0.0) == 1
    # cached nowhere (or only over the cap): the least outstanding
    assert router.route(request, caching((4, 0), (2, 0), (3, 0)), 0.0) == 1
    assert router.route(request, caching((12, 64), (2, 0), (1, 0)), 0.0) == 2


def test_precise_prefix_rejects_bad_parameters():
    with pytest.raises(ValueError, match="load_cap"):
        make("precise-prefix", load_cap=0.5)
