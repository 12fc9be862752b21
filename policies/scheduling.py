"""Scheduling policies: the order in which waiting requests are offered this step's budget.

A policy sees the waiting queue (entries with ``.request`` — a ``sim.types.Request`` —
and ``.resumed``, true for requests preempted by recompute) and returns the order to try
them in. The engine admits in that order until the token budget, the sequence cap or the
KV pool runs out; it stops at the first entry that does not fit, so a large request at
the head is not starved by smaller ones behind it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from policies.registry import Registry


class WaitingEntry(Protocol):
    request: Any
    resumed: bool


class SchedulerView(Protocol):
    """What a scheduler may read about its replica (the engine's Replica provides it)."""

    now: float

    def cached_prefix_tokens(self, request: Any) -> int: ...

    def served_tokens(self, tenant: int) -> int:
        """Tokens computed for ``tenant``; kept only if the policy sets
        ``uses_served_tokens = True``."""
        ...


class Scheduler(Protocol):
    def order(self, waiting: Sequence[WaitingEntry], view: SchedulerView) -> Sequence[WaitingEntry]:
        """The entries of ``waiting`` in the order to try them. Must not mutate it."""
        ...


SCHEDULERS: Registry = Registry("scheduler")


@SCHEDULERS.register("fcfs")
class FirstComeFirstServed:
    """Arrival order; preempted requests go back to the front (as vLLM does)."""

    def order(self, waiting, view):
        # The engine keeps the queue in exactly this order, so nothing to sort.
        return waiting
