"""One replica's live state between steps: its queues, its running sequences and the
progress of each request in flight, with the reads the engine and policies make of it.

Mutated only by the replica's parts (admission in :mod:`.scheduling`, preemption and
swap in :mod:`.memory`, results in :mod:`.completion`); everything here is plain data.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from backend.base import Allocator
from backend.connectors.peer import PeerConnector, PeerLoad
from backend.connectors.seam import ConnectorSeam
from sim.engine.records import RequestOutcome
from sim.engine.replica_state import DecodeSet, PrefillSeq, SwappedRequest, WaitingEntry
from sim.workload.request import Request


@dataclass(eq=False, slots=True)
class RequestProgress:
    """What the engine has observed of one request in flight (simulated seconds)."""

    request: Request
    replica: int
    samples_left: int
    first_scheduled_s: float = math.nan
    first_token_s: float = math.nan
    cached_prompt_tokens: int = 0
    preemption_times: tuple[float, ...] = ()  # (a tuple: rarely grown, never built empty)
    # The engine's prompt token ids (TokenSource.prompt), held from admission to the
    # queue until the outcome: a finished request keeps none.
    prompt: np.ndarray | None = None

    def preempted(self, now: float) -> None:
        self.preemption_times += (now,)

    def outcome(self, finish_s: float, output_tokens: int, reason: str) -> RequestOutcome:
        return RequestOutcome(
            self.request,
            self.replica,
            self.first_scheduled_s,
            self.first_token_s,
            finish_s,
            self.cached_prompt_tokens,
            len(self.preemption_times),
            output_tokens,
            reason,
            self.preemption_times,
        )


def _nothing() -> None:
    pass


def _no_link(load: PeerLoad) -> None:
    raise AssertionError(f"request {load.req_id}: a peer load with no link to run it")


class ReplicaState:
    """Queues, running sequences and requests in flight of one replica."""

    def __init__(self, allocator: Allocator, seam: ConnectorSeam | None = None):
        self.alloc = allocator
        # The KV connector beside the allocator (the offload tiers), as the scheduler
        # meets it: prompts' lookups and allocations, and each step's moves; None: none.
        self.seam = seam
        self.waiting: deque[WaitingEntry] = deque()
        # Async scheduling (EngineConfig.async_scheduling): arrivals during the step in
        # progress, and those of the step before, which the next plan may not see yet.
        self.arriving: list[WaitingEntry] = []
        self.ready: list[WaitingEntry] = []
        # Async scheduling under vLLM's rules (EngineRules.frees_lag): sequences
        # that finished in the step whose output the next plan cannot see yet. vLLM
        # removes them from its running list only when that output is processed, after
        # the plan: until then they hold their blocks and a max_num_seqs slot.
        self.lagging: list[int] = []
        self.prefilling: list[PrefillSeq] = []
        self.decodes = DecodeSet()
        self.swapped: deque[SwappedRequest] = deque()
        # Prefill/decode hand-offs (backend/connectors/peer.py; None: this instance is
        # not in a disaggregated pool). Decode role: prompts whose KV is being read from
        # a prefill instance, holding their blocks (vLLM's WAITING_FOR_REMOTE_KVS), and
        # those whose KV is in, to be scheduled before the waiting queue. Prefill role:
        # finished requests' sequences still held for the reader, by request.
        self.peer: PeerConnector | None = None
        self.loading: dict[int, PrefillSeq] = {}
        self.loaded: list[PrefillSeq] = []  # (in admission order: by sequence id)
        # Async scheduling: reads that ended during the step in progress, and those of
        # the step before, which the next plan cannot see yet (as ``arriving``, ``ready``).
        self.loaded_arriving: list[PrefillSeq] = []
        self.loaded_ready: list[PrefillSeq] = []
        self.held_for_peer: dict[int, int] = {}
        # Decode role: requests aborted while their KV was read, whose blocks stay held
        # until the read ends (vLLM delays the free of a WAITING_FOR_REMOTE_KVS request).
        self.read_for_nobody: dict[int, PrefillSeq] = {}
        # Async scheduling: held sequences whose reads ended in the step in progress,
        # freed after the next plan (made before that step's output is in), as lagging.
        self.lagging_held: list[int] = []
        self.on_peer_load: Callable[[PeerLoad], None] = _no_link
        self.in_flight: dict[int, RequestProgress] = {}  # submitted, not finished/rejected
        self.next_seq_id = 0
        self.num_preemptions = 0
        self.num_swaps_out = 0
        # Called before policies read the state from outside the replica's own step (a
        # router's view): brings a decode stretch up to date (sim/engine/fast_forward.py).
        self.before_read: Callable[[], None] = _nothing

    def has_work(self) -> bool:
        return bool(
            self.waiting or self.prefilling or len(self.decodes) or self.swapped or self.loaded
        )

    def waits_on_peer(self) -> bool:
        """Blocks here wait on another instance: KV being read in, or held for a reader.
        A replica that can schedule nothing then waits for the peer, rejecting nothing."""
        return bool(self.loading or self.held_for_peer or self.read_for_nobody)

    def has_arrivals(self) -> bool:
        """Requests (or the KV of handed-off ones) queued but not yet visible to the
        scheduler (async scheduling)."""
        return bool(self.arriving or self.ready or self.loaded_arriving or self.loaded_ready)

    def promote_arrivals(self, *, all_of_them: bool = False) -> None:
        """A step ended: the arrivals of the step before it join the queue, those of the
        step that ended become next; ``all_of_them``: every arrival joins (an engine
        with nothing in flight schedules at once). Reads that ended move alike."""
        self.waiting.extend(self.ready)
        self.ready = self.arriving
        self.arriving = []
        self.add_loaded(self.loaded_ready)
        self.loaded_ready, self.loaded_arriving = self.loaded_arriving, []
        if all_of_them:
            self.waiting.extend(self.ready)
            self.ready = []
            self.add_loaded(self.loaded_ready)
            self.loaded_ready = []

    def add_loaded(self, seqs: list[PrefillSeq]) -> None:
        """``seqs``' KV is in: they run in the order they were admitted, not that of
        their reads' ends (vLLM keeps them in one queue, in admission order)."""
        for seq in seqs:
            bisect.insort(self.loaded, seq, key=lambda s: s.seq_id)

    def is_idle(self) -> bool:
        """No sequence running, prefilling or swapped out (the queue may hold some)."""
        return not (self.prefilling or len(self.decodes) or self.swapped)

    def frees_lag(self) -> bool:
        """Blocks the next plan cannot see freed yet (async scheduling's lag)."""
        return bool(self.lagging or self.lagging_held)

    def num_running_seqs(self) -> int:
        """Sequences in the running set as the scheduler sees it: decoding, prefilling,
        and finished ones whose output it has not seen yet (``lagging``)."""
        return len(self.decodes) + len(self.prefilling) + len(self.lagging)

    def available_blocks(self) -> int:
        return self.alloc.available_blocks()

    def swapped_blocks(self) -> int:
        """Device blocks (the allocator's unit) the swapped-out requests held."""
        return sum(item.num_blocks for item in self.swapped)

    def seq_ids_of(self, request: Request) -> list[int]:
        prefills = [s.seq_id for s in self.prefilling if s.request is request]
        return prefills + self.decodes.seq_id[self.decodes.req_id == request.req_id].tolist()

    def prompt_of(self, request: Request) -> np.ndarray:
        """The prompt the engine holds for ``request`` while it is in flight here (what
        the allocator saw); ``request.prompt`` for any other."""
        progress = self.in_flight.get(request.req_id)
        if progress is None or progress.request is not request or progress.prompt is None:
            return request.prompt
        return progress.prompt

    def running_requests(self) -> list[Request]:
        """Requests with sequences on the device (prefilling or decoding): the
        preemption candidates."""
        req_ids = dict.fromkeys(s.request.req_id for s in self.prefilling)
        req_ids.update(dict.fromkeys(self.decodes.req_id.tolist()))
        return [self.in_flight[req_id].request for req_id in req_ids]

    def running_seqs(self) -> Iterator[tuple[int, int, int]]:
        """(request id, sequence id, tokens generated) of every running sequence."""
        for seq in self.prefilling:
            yield seq.request.req_id, seq.seq_id, seq.generated
        d = self.decodes
        yield from zip(d.req_id.tolist(), d.seq_id.tolist(), d.generated.tolist())

    def blocks_by_request(self) -> dict[int, int]:
        """Device blocks (the allocator's unit) held by each running request."""
        totals: dict[int, int] = {}
        for req_id, seq_id, _ in self.running_seqs():
            totals[req_id] = totals.get(req_id, 0) + self.alloc.held_blocks(seq_id)
        return totals

    def generated_by_request(self) -> dict[int, int]:
        """Output tokens each running request's sequences have produced so far."""
        totals: dict[int, int] = {}
        for req_id, _, generated in self.running_seqs():
            totals[req_id] = totals.get(req_id, 0) + generated
        return totals
