"""Routing policies: which replica serves an arriving request.

A router sees the request and a read-only view of each replica (policies.views.ReplicaView:
``outstanding`` requests queued or running there, ``kv_usage`` fraction of its pool in
use, ``cached_prefix_tokens(request)``, ...) and returns a replica index. Every router here is
deterministic: ties go to the lowest index.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from policies.registry import Registry
from policies.views import ReplicaView, RequestInfo


class Router(Protocol):
    def route(self, request: RequestInfo, replicas: Sequence[ReplicaView], now: float) -> int:
        """Index into ``replicas`` of the one that takes ``request``."""
        ...


ROUTERS: Registry = Registry(
    "router", field="routing.router", params_field="routing.params", methods=("route",)
)


def least_outstanding(replicas: Sequence[ReplicaView]) -> int:
    """Index of the replica with the fewest outstanding requests (lowest index on ties)."""
    return min(range(len(replicas)), key=lambda i: (replicas[i].outstanding, i))


def load_cap(replicas: Sequence[ReplicaView], factor: float, slack: int) -> float:
    """The most outstanding requests a cache-seeking router lets a replica have:
    ``factor`` x the mean + ``slack``, so one hot prefix cannot melt its replica."""
    return factor * sum(r.outstanding for r in replicas) / len(replicas) + slack


def _check_cap(factor: float, slack: int) -> None:
    if factor < 1 or slack < 0:
        raise ValueError(f"expected load_cap >= 1, slack >= 0; got {factor}, {slack}")


@ROUTERS.register("round-robin")
class RoundRobin:
    """Replicas in turn, regardless of load."""

    def __init__(self) -> None:
        self._next = 0

    def route(self, request, replicas, now):
        chosen = self._next % len(replicas)
        self._next += 1
        return chosen


@ROUTERS.register("least-outstanding")
class LeastOutstanding:
    """The replica with the fewest requests queued or running."""

    def route(self, request, replicas, now):
        return least_outstanding(replicas)


@ROUTERS.register("least-kv-usage")
class LeastKVUsage:
    """The replica whose KV pool is least used; ties by fewest outstanding."""

    def route(self, request, replicas, now):
        return min(
            range(len(replicas)),
            key=lambda i: (replicas[i].kv_usage, replicas[i].outstanding, i),
        )


@ROUTERS.register("prefix-affinity")
class PrefixAffinity:
    """Same first prompt tokens -> same replica (hash), least-outstanding above a load cap."""

    def __init__(self, prefix_tokens: int = 32, load_cap: float = 1.5, slack: int = 4):
        if prefix_tokens < 1:
            raise ValueError(f"expected prefix_tokens >= 1, got {prefix_tokens}")
        _check_cap(load_cap, slack)
        self.prefix_tokens = int(prefix_tokens)
        self.load_cap = float(load_cap)
        self.slack = int(slack)

    def home(self, request: RequestInfo, num_replicas: int) -> int:
        """The replica ``request``'s prefix hashes to. A stable hash (not Python's
        salted ``hash``) so the same scenario routes the same way in every process;
        the tenant is hashed too because it salts the prefix cache."""
        head = np.asarray(request.prompt[: self.prefix_tokens], dtype=np.int64)
        digest = hashlib.blake2b(head.tobytes(), digest_size=8, salt=_salt(request.tenant))
        return int.from_bytes(digest.digest(), "little") % num_replicas

    def route(self, request, replicas, now):
        home = self.home(request, len(replicas))
        # Above the cap the request goes where the queue is shortest (and warms that cache).
        if replicas[home].outstanding > load_cap(replicas, self.load_cap, self.slack):
            return least_outstanding(replicas)
        return home


@ROUTERS.register("precise-prefix")
class PrecisePrefix:
    """The replica whose caches hold the longest prefix of the prompt, as each replica's
    allocator answers at the moment of routing (its device prefix cache and its own
    offload tiers; a remote store every replica shares tells them apart in nothing):
    llm-d's precise prefix-cache scorer, which tracks each pod's KV events, with no
    delay on those events. Replicas with more than ``load_cap`` x mean +
    ``slack`` outstanding requests are passed over; ties go to the fewest outstanding; a
    prompt no replica holds goes to the least-outstanding replica."""

    def __init__(self, load_cap: float = 1.5, slack: int = 4):
        _check_cap(load_cap, slack)
        self.load_cap = float(load_cap)
        self.slack = int(slack)

    def route(self, request, replicas, now):
        cap = load_cap(replicas, self.load_cap, self.slack)
        best, best_rank = least_outstanding(replicas), (0, 0, 0)
        for index, replica in enumerate(replicas):
            if replica.outstanding > cap:
                continue
            rank = (replica.cached_prefix_tokens(request), -replica.outstanding, -index)
            if rank[0] and rank > best_rank:
                best, best_rank = index, rank
        return best


def _salt(tenant: int) -> bytes:
    return int(tenant).to_bytes(8, "little", signed=True)
