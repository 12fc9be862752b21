"""What policies may read about the run: typed, read-only views.

The engine implements these Protocols (sim/engine/view.py) and hands policies nothing
else: schedulers, victim policies and routers see a :class:`ReplicaView`, never the
replica itself, so a policy can order, pick or route but not change engine state. The
views answer from live state (no copies on the hot path); what they return is
immutable (numbers, tuples, the frozen requests).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class RequestInfo(Protocol):
    """A request's inputs (``sim.workload.Request``, frozen)."""

    @property
    def req_id(self) -> int: ...
    @property
    def arrival_s(self) -> float: ...
    @property
    def prompt(self) -> np.ndarray: ...  # int32 token ids
    @property
    def prompt_len(self) -> int: ...
    @property
    def output_len(self) -> int: ...  # the true length: only oracle policies may use it
    @property
    def tenant(self) -> int: ...
    @property
    def priority(self) -> int: ...  # larger = more important
    @property
    def n(self) -> int: ...  # parallel samples
    @property
    def prefix_group(self) -> int: ...
    @property
    def session(self) -> int: ...
    @property
    def turn(self) -> int: ...


class WaitingEntry(Protocol):
    """One waiting prefill, as a scheduler orders them."""

    @property
    def request(self) -> RequestInfo: ...
    @property
    def resumed(self) -> bool:
        """True for a request preempted by recompute (it holds generated tokens)."""
        ...


class ReplicaView(Protocol):
    """One replica, read-only. Per-request figures are for requests running there
    (0 or NaN for others)."""

    @property
    def index(self) -> int: ...
    @property
    def now(self) -> float:
        """Simulated seconds."""
        ...

    @property
    def outstanding(self) -> int:
        """Requests submitted here and neither finished nor rejected."""
        ...

    @property
    def num_waiting(self) -> int: ...
    @property
    def kv_usage(self) -> float:
        """Fraction of the device pool held by live sequences."""
        ...

    @property
    def swapped_blocks(self) -> int:
        """Device blocks the swapped-out requests held."""
        ...

    def running(self) -> tuple[RequestInfo, ...]:
        """Requests with sequences on the device (the preemption candidates)."""
        ...

    def cached_prefix_tokens(self, request: RequestInfo) -> int:
        """Leading prompt tokens of ``request`` this replica's prefix cache holds."""
        ...

    def blocks_held(self, request: RequestInfo) -> int: ...

    def admission_order(self, request: RequestInfo) -> int:
        """Grows with the time ``request``'s newest running sequence was admitted,
        resumed or forked here (the order of vLLM's running list); -1 for a request not
        running."""
        ...

    def generated_tokens(self, request: RequestInfo) -> int:
        """Output tokens its running samples have produced so far (all samples)."""
        ...

    def first_token_s(self, request: RequestInfo) -> float:
        """When its first token came out (NaN before)."""
        ...
