"""What policies may read about the run: typed, read-only views.

The engine implements these Protocols (sim/engine/view.py) and hands policies nothing
else: schedulers, victim policies and routers see a :class:`ReplicaView`, never the
replica itself, so a policy can order, pick or route but not change engine state. The
views answer from live state (no copies on the hot path); what they return is
immutable (numbers, tuples, the frozen requests). A batching mode composes a step
through :class:`StepBuilder`, the moves the engine offers it.
"""

from __future__ import annotations

from collections.abc import Callable
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
        """Leading prompt tokens of ``request`` this replica's prefix cache holds: on
        its device or in its own offload tiers, not in a remote store every replica
        shares."""
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


class StepBuilder(Protocol):
    """What a batching mode may do with the step being planned (the engine provides it)."""

    def decodes(self) -> None: ...

    def running_prefills(self) -> None: ...

    def running(self) -> None:
        """Decodes and running prompt chunks together, in admission order (instead of
        ``decodes()`` and ``running_prefills()``)."""
        ...

    def admit(
        self, only: Callable[[RequestInfo], bool] | None = None, beyond_budget: bool = False
    ) -> list[RequestInfo]:
        """Admit waiting requests (those ``only`` accepts, stopping at the first it
        refuses; with ``beyond_budget`` also when the step's token budget is spent,
        their prompts then run in later steps); returns the requests admitted."""
        ...

    @property
    def has_prefill_chunks(self) -> bool:
        """Whether the step holds any prompt chunk so far."""
        ...

    @property
    def replica_empty(self) -> bool:
        """No sequence running, prefilling or swapped out on this replica."""
        ...

    @property
    def preempted(self) -> bool:
        """Whether planning this step has preempted a request so far."""
        ...


class BatchingMode(Protocol):
    chunks_prompts: bool
    #: True promises that with nothing waiting, prefilling or swapped out, ``compose``
    #: schedules the decodes and nothing else, and keeps no per-step state, so the engine
    #: may fast-forward such steps (sim/engine/fast_forward.py). A plug-in may leave it out
    #: (False).
    decode_stretches: bool

    def compose(self, step: StepBuilder) -> None:
        """Plan one step with ``step``'s moves; mutates the mode's own state only."""
        ...
