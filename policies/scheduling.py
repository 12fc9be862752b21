"""Scheduling policies: the order in which waiting requests are offered this step's budget.

A policy sees the waiting queue (entries with ``.request`` and ``.resumed``, true for
requests preempted by recompute; policies.views) and a read-only view of its replica, and
returns the order to try them in. The engine admits in that order until the token
budget, the sequence cap or the KV pool runs out; it stops at the first entry that does
not fit, so a large request at the head is not starved by smaller ones behind it.

Every policy here but ``strict-priority`` (vLLM's own priority queue) keeps resumed
entries first, in the queue's own order: they were running and hold progress (generated
tokens), and the engine put them at the front on purpose. Only fresh entries are
reordered, by a sort key whose last elements are the arrival time and the request id,
so every order is deterministic. Each ``order`` call is one O(n log n) sort at worst.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from policies.context import SLO, ServedTokens
from policies.registry import Registry
from policies.views import ReplicaView, RequestInfo, WaitingEntry


class Scheduler(Protocol):
    def order(self, waiting: Sequence[WaitingEntry], view: ReplicaView) -> Sequence[WaitingEntry]:
        """The entries of ``waiting`` in the order to try them. Must not mutate it."""
        ...


SCHEDULERS: Registry = Registry(
    "scheduler", field="scheduler.policy", params_field="scheduler.params", methods=("order",)
)


def resumed_first(
    waiting: Sequence[WaitingEntry], key: Callable[[RequestInfo], Any], limit: int | None = None
) -> list[WaitingEntry]:
    """Resumed entries in queue order, then the fresh ones sorted by ``key(request)``
    (only the first ``limit`` of them, the rest keeping queue order, if given).
    Returns a new list; ``waiting`` is not mutated."""
    resumed = [entry for entry in waiting if entry.resumed]
    fresh = [entry for entry in waiting if not entry.resumed]
    head, tail = (fresh, []) if limit is None else (fresh[:limit], fresh[limit:])
    head.sort(key=lambda entry: key(entry.request))
    return resumed + head + tail


class FixedKeys:
    """Sort keys that never change for a request, computed once per request rather than
    on every step (a long queue is re-ordered every step). Forgets requests that left
    the queue once it holds many more keys than the queue has entries."""

    def __init__(self, key: Callable[[RequestInfo], Any]):
        self._key = key
        self._keys: dict[int, Any] = {}

    def __call__(self, request: RequestInfo) -> Any:
        found = self._keys.get(request.req_id)
        if found is None:
            found = self._keys[request.req_id] = self._key(request)
        return found

    def forget_all_but(self, waiting: Sequence[WaitingEntry]) -> None:
        if len(self._keys) > 2 * len(waiting) + 1024:
            keep = {entry.request.req_id for entry in waiting}
            self._keys = {req_id: k for req_id, k in self._keys.items() if req_id in keep}


def fixed_key_order(waiting: Sequence[WaitingEntry], keys: FixedKeys) -> list[WaitingEntry]:
    """:func:`resumed_first` with memoised fixed keys."""
    keys.forget_all_but(waiting)
    return resumed_first(waiting, keys)


def arrival(request: RequestInfo) -> tuple[float, int]:
    """The tie-break shared by every policy: earlier arrival, then lower id."""
    return (request.arrival_s, request.req_id)


@SCHEDULERS.register("fcfs")
class FirstComeFirstServed:
    """Arrival order; preempted requests go back to the front (as vLLM does)."""

    def order(self, waiting, view):
        # The engine keeps the queue in exactly this order, so nothing to sort.
        return waiting


@SCHEDULERS.register("priority")
class PriorityWithAging:
    """Highest priority first, a priority level gained per ``aging_s`` waited (no starvation)."""

    def __init__(self, aging_s: float = 10.0):
        if not aging_s > 0:
            raise ValueError(f"aging_s must be > 0, got {aging_s}")
        self.aging_s = float(aging_s)

        # Effective priority = priority + (now - arrival) / aging_s. ``now`` is the same
        # for every entry, so ordering by priority - arrival / aging_s is equivalent and
        # needs no clock (a request waiting aging_s longer outranks one level above it),
        # which makes the key fixed per request.
        self._keys = FixedKeys(lambda r: (-(r.priority - r.arrival_s / self.aging_s), *arrival(r)))

    def order(self, waiting, view):
        return fixed_key_order(waiting, self._keys)


@SCHEDULERS.register("strict-priority")
class StrictPriority:
    """Highest priority first, then earliest arrival, preempted requests included
    (vLLM V1's priority queue: a preempted request goes back into the heap under its
    own priority and arrival, not to the front). No aging: a low priority can starve."""

    def __init__(self):
        self._keys = FixedKeys(lambda r: (-r.priority, *arrival(r)))

    def order(self, waiting, view):
        self._keys.forget_all_but(waiting)
        return sorted(waiting, key=lambda entry: self._keys(entry.request))


@SCHEDULERS.register("shortest-prompt-first")
class ShortestPromptFirst:
    """Fewest prompt tokens first (cheapest prefill; long prompts can wait behind a stream)."""

    def __init__(self):
        self._keys = FixedKeys(lambda r: (r.prompt_len, *arrival(r)))

    def order(self, waiting, view):
        return fixed_key_order(waiting, self._keys)


@SCHEDULERS.register("sjf-oracle")
class ShortestJobFirstOracle:
    """Fewest true output tokens (x n samples) first: the upper-bound baseline no server has."""

    def __init__(self):
        self._keys = FixedKeys(lambda r: (r.output_len * r.n, r.prompt_len, *arrival(r)))

    def order(self, waiting, view):
        return fixed_key_order(waiting, self._keys)


@SCHEDULERS.register("fair-share")
class FairShare:
    """The tenant with the fewest tokens served so far first, arrival order within a tenant."""

    def __init__(self, served_tokens: ServedTokens):
        # Asking for served_tokens makes the engine count tokens computed per tenant.
        self.served_tokens = served_tokens

    def order(self, waiting, view):
        served: dict[int, int] = {}  # one lookup per tenant, not per entry

        def key(request):
            tenant = request.tenant
            if tenant not in served:
                served[tenant] = self.served_tokens(tenant)
            return (served[tenant], *arrival(request))

        return resumed_first(waiting, key)


@SCHEDULERS.register("longest-prefix-match")
class LongestPrefixMatch:
    """Longest prompt prefix already in this replica's cache first (SGLang's LPM)."""

    def __init__(self, max_scan: int = 128):
        if max_scan < 1:
            raise ValueError(f"max_scan must be >= 1, got {max_scan}")
        # Looking a prefix up hashes the prompt's blocks; like SGLang, only the first
        # ``max_scan`` fresh entries are ranked and the rest keep arrival order, which
        # bounds the per-step cost on a long queue.
        self.max_scan = int(max_scan)

    def order(self, waiting, view):
        def key(request):
            return (-view.cached_prefix_tokens(request), *arrival(request))

        return resumed_first(waiting, key, limit=self.max_scan)


@SCHEDULERS.register("edf")
class EarliestDeadlineFirst:
    """Earliest TTFT deadline (arrival + ``slo.ttft_s``) first. With ``late: last``
    (default) requests whose deadline has already passed go after those that can still
    make it: under overload, serving a lost cause first only makes the next one late
    too. ``late: keep`` orders purely by deadline (with one SLO for every request that
    is arrival order)."""

    def __init__(self, slo: SLO, late: str = "last"):
        if late not in ("last", "keep"):
            raise ValueError(f"late must be 'last' or 'keep', got {late!r}")
        self.ttft_s = slo.ttft_s
        self.late_last = late == "last"

    def order(self, waiting, view):
        now, ttft_s, late_last = view.now, self.ttft_s, self.late_last

        def key(request):
            deadline = request.arrival_s + ttft_s
            return (late_last and deadline < now, deadline, request.req_id)

        return resumed_first(waiting, key)
