"""Preemption victim policies: who loses its KV memory on a free-list miss.

A policy gets the requests currently holding KV blocks on the device (each a
``sim.workload.Request``) and returns the one to preempt. The mode (recompute or swap) is
the engine's, chosen by the scenario.

Ties always go to the most recently arrived request (then the highest id), so a run is
deterministic and, all else equal, the request with the least waiting invested loses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from policies.registry import Registry
from policies.scheduling import arrival  # the shared tie-break key


class VictimView(Protocol):
    """What a victim policy may read about its replica."""

    now: float

    def blocks_held(self, request: Any) -> int: ...

    def generated_tokens(self, request: Any) -> int: ...


class VictimPolicy(Protocol):
    def pick(self, running: Sequence[Any], view: VictimView) -> Any:
        """One element of ``running`` (never empty) to preempt. Mutates nothing."""
        ...


VICTIMS: Registry = Registry("preemption victim")


@VICTIMS.register("last-arrived")
class LastArrived:
    """The most recently arrived request loses its memory first (vLLM's default)."""

    def pick(self, running, view):
        return max(running, key=arrival)  # the latest arrival (then highest id)


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
