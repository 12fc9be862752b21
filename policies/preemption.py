"""Preemption: who loses its KV memory on a free-list miss (victim policies), and how
(preemption modes).

A victim policy gets the requests currently holding KV blocks on the device and a
read-only view of the replica (policies.views.ReplicaView) and returns the one to
preempt. A mode then says whether that victim is swapped to the CPU pool (when it has
room) or recomputed later: ``recompute`` never swaps, ``swap`` always tries to.

Ties always go to the most recently arrived request (then the highest id), so a run is
deterministic and, all else equal, the request with the least waiting invested loses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from policies.context import SLO
from policies.registry import Registry
from policies.scheduling import arrival  # the shared tie-break key
from policies.views import ReplicaView, RequestInfo


class VictimPolicy(Protocol):
    def pick(self, running: Sequence[RequestInfo], view: ReplicaView) -> RequestInfo:
        """One element of ``running`` (never empty) to preempt. Mutates nothing."""
        ...


class PreemptionMode(Protocol):
    def swap(self, victim: RequestInfo, view: ReplicaView) -> bool:
        """Whether to swap ``victim`` out (if the CPU pool has room) rather than free its
        blocks and recompute it later."""
        ...


VICTIMS: Registry = Registry(
    "preemption victim",
    field="preemption.victim",
    params_field="preemption.params",
    methods=("pick",),
)
MODES: Registry = Registry("preemption mode", field="preemption.mode", methods=("swap",))


@MODES.register("recompute")
class Recompute:
    """Free the victim's blocks; it is re-prefilled from prompt + generated tokens."""

    def swap(self, victim, view):
        return False


@MODES.register("swap")
class Swap:
    """Copy the victim's blocks to the CPU pool and back (recompute when it is full)."""

    def swap(self, victim, view):
        return True


@VICTIMS.register("last-arrived")
class LastArrived:
    """The most recently arrived request loses its memory first (the ``pagesim`` engine's
    choice; vLLM's is ``last-admitted``)."""

    def pick(self, running, view):
        return max(running, key=arrival)  # the latest arrival (then highest id)


@VICTIMS.register("last-admitted")
class LastAdmitted:
    """The request admitted (or resumed) most recently, the tail of vLLM V1's running
    list (``self.running.pop()``): not the last to arrive once a preempted request has
    come back."""

    def pick(self, running, view):
        return max(running, key=view.admission_order)


@VICTIMS.register("lowest-priority")
class LowestPriority:
    """The lowest-priority request first (vLLM's priority mode); ties: last arrived."""

    def pick(self, running, view):
        return max(running, key=lambda r: (-r.priority, *arrival(r)))


@VICTIMS.register("most-blocks")
class MostBlocks:
    """The request holding the most device blocks first: one preemption frees the most."""

    def pick(self, running, view):
        return max(running, key=lambda r: (view.blocks_held(r), *arrival(r)))


@VICTIMS.register("fewest-generated")
class FewestGenerated:
    """The request with the fewest output tokens so far first: the least work is redone."""

    def pick(self, running, view):
        return max(running, key=lambda r: (-view.generated_tokens(r), *arrival(r)))


@VICTIMS.register("slo-aware")
class MostSlack:
    """The request with the most slack before its next SLO deadline: the first token
    is due ``slo.ttft_s`` after arrival, each later one ``slo.tpot_s`` after the
    previous. It can best afford the delay a preemption costs; ties: last arrived."""

    def __init__(self, slo: SLO):
        self.slo = slo

    def slack(self, request: RequestInfo, view: ReplicaView) -> float:
        first = view.first_token_s(request)
        if math.isnan(first):
            due = request.arrival_s + self.slo.ttft_s
        else:
            per_sample = view.generated_tokens(request) / request.n
            due = first + self.slo.tpot_s * per_sample
        return due - view.now

    def pick(self, running, view):
        return max(running, key=lambda r: (self.slack(r, view), *arrival(r)))
