"""Preemption victim policies: who loses its KV memory on a free-list miss.

A policy gets the requests currently holding KV blocks on the device (each a
``sim.types.Request``) and returns the one to preempt. The mode (recompute or swap) is
the engine's, chosen by the scenario.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from policies.registry import Registry


class VictimView(Protocol):
    """What a victim policy may read about its replica."""

    now: float

    def blocks_held(self, request: Any) -> int: ...

    def generated_tokens(self, request: Any) -> int: ...


class VictimPolicy(Protocol):
    def pick(self, running: Sequence[Any], view: VictimView) -> Any:
        """One element of ``running`` (never empty) to preempt."""
        ...


VICTIMS: Registry = Registry("preemption victim")


@VICTIMS.register("last-arrived")
class LastArrived:
    """The most recently arrived request loses its memory first (vLLM's default)."""

    def pick(self, running, view):
        return max(running, key=lambda r: (r.arrival_s, r.req_id))
