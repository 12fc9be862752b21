"""The read-only view of a replica that policies get (policies.views.ReplicaView).

Answers from the live state, so reading costs nothing until asked; returns numbers,
tuples and frozen requests only. Python cannot stop code that reaches into private
attributes, but nothing public here changes the engine, and the view takes no new
attributes (``__slots__``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from sim.engine.state import ReplicaState
from sim.workload.request import Request


class EngineView:
    """One replica as policies see it (schedulers, victim policies, routers).

    The reads a decode stretch changes (memory, prefix keys, tokens generated) first
    bring it up to the present (``state.before_read``, sim/engine/fast_forward.py); queue
    lengths, the running set and first-token times do not change within one."""

    __slots__ = ("_state", "_clock", "_index", "_held_prefix")

    def __init__(self, state: ReplicaState, clock: Callable[[], float], index: int):
        self._state = state
        self._clock = clock
        self._index = index
        # What this replica holds, not a remote store every replica would answer alike.
        seam = state.seam
        self._held_prefix = (
            seam.held_prefix_tokens if seam is not None else state.alloc.cached_prefix_tokens
        )

    @property
    def index(self) -> int:
        return self._index

    @property
    def now(self) -> float:
        return self._clock()

    @property
    def outstanding(self) -> int:
        return len(self._state.in_flight)

    @property
    def num_waiting(self) -> int:
        return len(self._state.waiting)

    @property
    def kv_usage(self) -> float:
        self._state.before_read()
        alloc = self._state.alloc
        return alloc.usage().used_blocks / alloc.num_blocks

    @property
    def swapped_blocks(self) -> int:
        return self._state.swapped_blocks()

    def running(self) -> tuple[Request, ...]:
        return tuple(self._state.running_requests())

    def cached_prefix_tokens(self, request: Request) -> int:
        self._state.before_read()
        prompt = self._state.prompt_of(request)
        return self._held_prefix(prompt, salt=request.tenant)

    def admission_order(self, request: Request) -> int:
        # Sequence ids are numbered at admission (a resumed request gets new ones), so a
        # request's newest live one orders it (with fanned-out samples, its newest sample).
        seq_ids = self._state.seq_ids_of(request)
        return max(seq_ids) if seq_ids else -1

    def blocks_held(self, request: Request) -> int:
        self._state.before_read()
        return self._blocks_by_request().get(request.req_id, 0)

    def generated_tokens(self, request: Request) -> int:
        self._state.before_read()
        return self._generated_by_request().get(request.req_id, 0)

    def running_samples(self) -> tuple[tuple[int, int, int], ...]:
        """(request id, sample index, tokens generated) of every sequence on the device,
        prefilling ones included; a sample's count never decreases while it runs (what
        a preempted sample had generated comes back with it). Read by ``pagesim serve``
        to stream each step's new tokens."""
        state = self._state
        state.before_read()
        rows = [(s.request.req_id, s.sample, s.generated) for s in state.prefilling]
        d = state.decodes
        rows += zip(d.req_id.tolist(), d.sample.tolist(), d.generated.tolist(), strict=True)
        return tuple(rows)

    def first_token_s(self, request: Request) -> float:
        progress = self._state.in_flight.get(request.req_id)
        return math.nan if progress is None else progress.first_token_s

    def _blocks_by_request(self) -> dict[int, int]:
        return self._state.blocks_by_request()

    def _generated_by_request(self) -> dict[int, int]:
        return self._state.generated_by_request()

    def frozen(self) -> EngineView:
        """A view for one decision (a victim pick): per-request totals are computed
        for every running request at once, on first use, so a pick that reads them
        for each candidate costs O(running sequences), not a scan per candidate."""
        return _DecisionView(self._state, self._clock, self._index)


class _DecisionView(EngineView):
    """An EngineView whose per-request totals are computed once (the state does not
    change while a policy decides)."""

    __slots__ = ("_blocks", "_generated")

    def __init__(self, state: ReplicaState, clock: Callable[[], float], index: int):
        super().__init__(state, clock, index)
        self._blocks: dict[int, int] | None = None
        self._generated: dict[int, int] | None = None

    def _blocks_by_request(self) -> dict[int, int]:
        if self._blocks is None:
            self._blocks = self._state.blocks_by_request()
        return self._blocks

    def _generated_by_request(self) -> dict[int, int]:
        if self._generated is None:
            self._generated = self._state.generated_by_request()
        return self._generated
