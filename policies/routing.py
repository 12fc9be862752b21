"""Routing policies: which replica serves an arriving request.

A router sees the request and a view of each replica (``outstanding`` requests and
``kv_usage`` fraction, plus ``cached_prefix_tokens(request)``) and returns a replica index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from policies.registry import Registry


class Router(Protocol):
    def route(self, request: Any, replicas: Sequence[Any], now: float) -> int:
        """Index into ``replicas`` of the one that takes ``request``."""
        ...


ROUTERS: Registry = Registry("router")


@ROUTERS.register("round-robin")
class RoundRobin:
    """Replicas in turn, regardless of load."""

    def __init__(self) -> None:
        self._next = 0

    def route(self, request, replicas, now):
        chosen = self._next % len(replicas)
        self._next += 1
        return chosen
