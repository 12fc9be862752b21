"""Requests the client gives up on: a benchmark client stops waiting for a request some
seconds after sending it (aiohttp's default total timeout is 300 s) and closes the
connection, and the engine aborts it: it leaves the queue or the running batch, its KV
is freed, and it counts as failed.

The engine looks at its clients between steps, as vLLM's engine core handles aborts
between steps: a deadline that passes during a step takes effect at that step's end.
A decode stretch (sim/engine/fast_forward.py) is planned no further than the next deadline,
so fast-forwarding aborts the same request at the same step. A replica that waits with
requests in flight (their KV read from a prefill instance) wakes at the next deadline,
as vLLM's engine core steps empty while a request waits for remote KV. A request aborted
while its KV is read keeps its blocks until the read ends (vLLM delays their free).
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
    _abort_hand_off(memory, request)
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


def _abort_hand_off(memory: Memory, request: Request) -> None:
    """A request whose prompt KV comes from a prefill instance: while it is read, its
    blocks stay held until the read ends (vLLM delays their free); once it is in but not
    yet scheduled, they are freed now. Mutates the state and the allocator."""
    state = memory.state
    seq = state.loading.pop(request.req_id, None)
    if seq is not None:
        state.read_for_nobody[request.req_id] = seq
    for queue in (state.loaded, state.loaded_ready, state.loaded_arriving):
        for seq in [s for s in queue if s.request is request]:
            queue.remove(seq)
            memory.alloc.free(seq.seq_id)
