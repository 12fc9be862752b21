"""Requests the client gives up on: a benchmark client stops waiting for a request some
seconds after sending it (aiohttp's default total timeout is 300 s) and closes the
connection, and the engine aborts it: it leaves the queue or the running batch, its KV
is freed, and it counts as failed.

The engine looks at its clients between steps, as vLLM's engine core handles aborts
between steps: a deadline that passes during a step takes effect at that step's end.
A decode stretch (sim/engine/fast_forward.py) is planned no further than the next deadline,
so fast-forwarding aborts the same request at the same step.
"""

from __future__ import annotations

import heapq
import math

from sim.engine.memory import Memory
from sim.engine.state import ReplicaState
from sim.workload.request import Request

TIMED_OUT = "timed out: the client gave up after {timeout:g} s"


class Deadlines:
    """Each request's give-up time, soonest first. Mutates only itself; :meth:`abort`
    mutates the replica's state through its memory."""

    def __init__(self, timeout_s: float | None):
        self.timeout_s = timeout_s
        self._heap: list[tuple[float, int]] = []

    def add(self, request: Request) -> None:
        if self.timeout_s is not None:
            heapq.heappush(self._heap, (request.arrival_s + self.timeout_s, request.req_id))

    def next_s(self) -> float:
        """The soonest deadline of a request that may still be in flight (inf: none)."""
        return self._heap[0][0] if self._heap else math.inf

    def due(self, now: float, state: ReplicaState) -> list[int]:
        """Requests still in flight whose deadline has passed at ``now``, soonest first
        (requests already done are dropped on the way)."""
        out = []
        while self._heap and self._heap[0][0] <= now:
            _, req_id = heapq.heappop(self._heap)
            if req_id in state.in_flight:
                out.append(req_id)
        return out


def abort(memory: Memory, request: Request) -> int:
    """Take ``request`` out of the replica wherever it is (queued, arriving, prefilling,
    decoding, swapped out) and free its blocks; returns the output tokens its sequences
    had generated. Mutates the state and the allocator."""
    state = memory.state
    mine = lambda entry: entry.request is request  # noqa: E731
    for queue in ("arriving", "ready"):
        setattr(state, queue, [e for e in getattr(state, queue) if not mine(e)])
    kept = [e for e in state.waiting if not mine(e)]
    if len(kept) != len(state.waiting):
        state.waiting.clear()
        state.waiting.extend(kept)
    generated = 0
    for item in [s for s in state.swapped if s.request is request]:
        state.swapped.remove(item)
        for seq_id in (*(p.seq_id for p in item.prefills), *item.decodes["seq_id"].tolist()):
            memory.alloc.free(seq_id)
        generated += int(item.decodes["generated"].sum())
    prefills, decodes = memory.detach(request)
    for seq_id in (*(p.seq_id for p in prefills), *decodes["seq_id"].tolist()):
        memory.alloc.free(seq_id)
    return generated + int(decodes["generated"].sum())
