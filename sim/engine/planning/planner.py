"""Planning one step of one replica: which decodes run, which prompt chunks, which
waiting requests are admitted, under the token budget, ``max_num_seqs`` and memory.

The batching mode (policies.batching) decides the order of the moves through a
:class:`~sim.engine.planning.step_builder.StepBuilder`; this module carries them out. A prompt's
slots are allocated when its request is admitted (prefix-cache hits come back from
``allocate``); a decode appends one slot, and a free-list miss preempts (see
:mod:`.memory`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from backend.base import OutOfBlocks, ReservingAllocator
from backend.capabilities import (
    ReleasesBehindProcessed,
)
from backend.step import Batch, PrefillChunk
from sim.engine.config import EngineConfig, ReplicaPolicies
from sim.engine.executor import TokenSource
from sim.engine.memory import Memory
from sim.engine.planning.allocator_entries import (
    batch_appender,
    keeping_prefix_tails,
    prompt_allocator,
    whole_sequence_check,
)
from sim.engine.planning.offers import batching_accepts, offered
from sim.engine.planning.step_builder import StepBuilder
from sim.engine.policy_guard import PolicyFailure, brief
from sim.engine.records import Limit
from sim.engine.replica_state import Moves, PlanDraft, PrefillSeq, StepPlan
from sim.engine.state import ReplicaState
from sim.engine.view import EngineView
from sim.workload.request import Request


class StepPlanner:
    """Composes each step of one replica. Mutates the state (admission moves waiting
    entries to the prefilling set; decodes take slots) and the allocator."""

    def __init__(
        self,
        state: ReplicaState,
        config: EngineConfig,
        policies: ReplicaPolicies,
        memory: Memory,
        outputs: TokenSource,
        view: EngineView,
    ):
        self.state = state
        self.alloc = state.alloc
        self.cfg = config
        self.rules = config.rules
        self.memory, self.outputs = memory, outputs
        self.scheduler = policies.scheduler
        self.batching = policies.batching
        self.admission = policies.admission
        self.view = view  # what the scheduler reads
        self._logged_preemptions = 0  # num_preemptions already in a step's record
        self.append_batch = batch_appender(self.alloc)
        seam = state.seam
        self._allocate = keeping_prefix_tails(self.alloc, prompt_allocator(self.alloc, seam))
        # A prompt's cached prefix: the device's, and what a KV connector supplies after it.
        self.cached_prefix_tokens = (
            seam.cached_prefix_tokens if seam is not None else self.alloc.cached_prefix_tokens
        )
        # (checked once: a Protocol isinstance costs more than the rest of a small step)
        counting = isinstance(self.alloc, ReleasesBehindProcessed)
        self._counts_steps = self.alloc if counting else None
        # Reserving (contiguous) allocators size a request's region from the start
        # (``reserve(prompt, max_new_tokens)``), so they always admit by whole prompt.
        reserving = isinstance(self.alloc, ReservingAllocator)
        self.reserve = self.alloc.reservation_size if reserving else None
        # A KV connector's moves are taken once per planned step (loads before the
        # forward, stores after it); None without one.
        self.take_connector_transfers = seam.take_transfers if seam is not None else None
        # Prompts are cut into chunks only if both the scenario and the mode allow it.
        self.chunking = config.chunked_prefill and self.batching.chunks_prompts
        # Admitting part of a prompt only makes sense when prompts run in chunks.
        self.first_chunk_admission = (
            not self.admission.whole_prompt and self.reserve is None and self.chunking
        )
        self.whole_sequence = self.first_chunk_admission and self.admission.whole_sequence_must_fit
        self.prefill_cap = 0  # long_prefill_token_threshold in force this step (0: none)
        self._can_admit = whole_sequence_check(self.alloc, config, seam)

    @property
    def unlogged_preemptions(self) -> bool:
        """Preemptions made since the last step's record (the next record carries them)."""
        return self.state.num_preemptions != self._logged_preemptions

    def carry_preemptions(self, plan: StepPlan) -> None:
        """``plan`` is dropped unrun: its preemptions go to the next step's record."""
        self._logged_preemptions -= plan.num_preempted

    def step_begins(self) -> None:
        """A step's planning begins: the rules tell an allocator that counts steps."""
        self.rules.step_begins(self._counts_steps, self.cfg.async_scheduling)

    def plan(self) -> tuple[Batch, StepPlan]:
        """The next step's batch and what to apply when its time has passed."""
        self.step_begins()
        plan = PlanDraft()
        moves = Moves()
        # vLLM caps a prompt's share only when another request could use the budget.
        state = self.state
        others = state.num_running_seqs() + len(state.waiting) > 1
        self.prefill_cap = self.cfg.long_prefill_token_threshold if others else 0
        self.memory.swap_in_waiting(moves)
        step = StepBuilder(self, plan, moves)
        self.batching.compose(step)
        decode_ids, decode_ctx, decode_tokens = step.decode_arrays
        chunks = tuple(
            PrefillChunk(s.seq_id, s.computed, s.tokens[s.computed : s.computed + n])
            for s, n in plan.chunks
        )
        self.rules.step_planned(self.alloc, ((s.seq_id, s.computed + n) for s, n in plan.chunks))
        # Preemptions made while planning, and any made between steps (see Replica.unblock).
        preemptions = self.state.num_preemptions
        plan.num_preempted = preemptions - self._logged_preemptions
        self._logged_preemptions = preemptions
        if plan.num_preempted or self.state.swapped:
            plan.limit = Limit.KV_BLOCKS  # memory is what binds, whatever else also did
        stores = ()
        if self.take_connector_transfers is not None:
            loads, stores = self.take_connector_transfers()
            moves.loads.extend(loads)
        batch = Batch(chunks, decode_ids, decode_ctx, decode_tokens, moves.in_order(), stores)
        return batch, plan.final()

    # -- decodes and running prefills ---------------------------------------------------
    def schedule_decodes(self, plan: PlanDraft, moves: Moves):
        """Give every decoding sequence one slot, preempting on a free-list miss."""
        d = self.state.decodes
        while len(d):
            # The newest sampled token (position generated - 1) is fed and gets its slot.
            tokens = self.outputs.decode_inputs(d.stream, d.generated)
            try:
                # Refused appends change nothing (OutOfBlocks is raised before any
                # mutation), so trying first costs one call on the common path.
                moves.copies.extend(self.append_batch(d.seq_id, tokens))
                break
            except OutOfBlocks:
                self.memory.make_room(moves)
        plan.decode_rows = len(d)
        if not plan.decode_rows:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, np.zeros(0, dtype=np.int32)
        d.context += 1
        return d.seq_id.copy(), d.context.copy(), tokens

    def schedule_running_prefills(self, plan: PlanDraft, budget: int) -> int:
        for seq in self.state.prefilling:
            if budget <= 0:
                break
            take = self.hold_slots(seq, self.chunk_size(seq, budget, plan))
            if not take:
                if self.first_chunk_admission:
                    continue  # out of blocks for this one; others may still fit
                break
            self.take_chunk(plan, seq, take)
            budget -= take
        return budget

    def take_chunk(self, plan: PlanDraft, seq: PrefillSeq, take: int) -> None:
        """``take`` tokens of ``seq`` run this step (their slots are held); the engine's
        rules say whether its full blocks are offered to lookups now (vLLM: a request
        admitted later in this step hits them) or once the step is planned."""
        plan.chunks.append((seq, take))
        self.rules.chunk_scheduled(self.alloc, seq.seq_id, seq.computed + take)

    def hold_chunk(self, seq: PrefillSeq, take: int) -> None:
        """Hold the slots of ``seq``'s next ``take`` tokens (whose blocks are free)."""
        missing = seq.computed + take - seq.held
        if missing > 0:
            self.alloc.append(seq.seq_id, seq.tokens[seq.held : seq.held + missing])
            seq.held += missing

    def hold_slots(self, seq: PrefillSeq, take: int) -> int:
        """Make the allocator hold slots for the next ``take`` tokens of ``seq``; returns
        how many it could (fewer when blocks run out under first-chunk admission)."""
        missing = seq.computed + take - seq.held
        if missing <= 0:
            return take
        room = self.alloc.tokens_that_fit(seq.held, self.state.available_blocks())
        grow = min(missing, room)
        if grow > 0:
            self.alloc.append(seq.seq_id, seq.tokens[seq.held : seq.held + grow])
            seq.held += grow
        return min(take, seq.held - seq.computed)

    def chunk_size(self, seq: PrefillSeq, budget: int, plan: PlanDraft) -> int:
        """Prompt tokens of ``seq`` to compute this step (0: none)."""
        remaining = seq.tokens.shape[0] - seq.computed
        if self.prefill_cap and self.chunking:
            remaining = min(remaining, self.prefill_cap)
        return self.whole_prompt_size(remaining, budget, plan)

    def whole_prompt_size(self, remaining: int, budget: int, plan: PlanDraft) -> int:
        """Tokens of a prompt with ``remaining`` to compute that this step takes: up to
        the budget with chunking; else all of them or none, except that a prompt longer
        than the budget (a resumed request's prompt + outputs) may run alone, so that it
        cannot wait forever."""
        if self.chunking or remaining <= budget:
            return min(remaining, budget)
        alone = not plan.chunks and not plan.decode_rows
        return remaining if alone else 0

    # -- admission ------------------------------------------------------------------------
    def admit_waiting(
        self,
        plan: PlanDraft,
        budget: int,
        only: Callable[[Request], bool] | None = None,
        beyond_budget: bool = False,
    ) -> tuple[list[Request], int]:
        """Admit waiting requests in the scheduler's order (those ``only`` accepts, up to
        the first it refuses) while slots, budget and memory last; with
        ``beyond_budget`` a spent budget does not stop admission (those requests hold
        their memory and start computing in later steps). Records in ``plan.limit``
        what stopped admission with requests left. Returns the requests admitted and
        the budget left."""
        budget = self.schedule_loaded(plan, budget)
        waiting = self.state.waiting
        if not waiting:
            return [], budget
        plan.limit = self.admission_limit(budget, beyond_budget)
        if plan.limit != Limit.NONE:
            return [], budget  # (before asking the scheduler to order a long queue)
        admitted = []
        plan.asked_scheduler = True
        for entry in offered(self.scheduler, self.view, waiting, admitted):
            plan.limit = self.admission_limit(budget, beyond_budget)
            if plan.limit != Limit.NONE:
                break
            if only is not None and not batching_accepts(only, entry.request):
                plan.limit = Limit.POLICY  # the batching mode holds the rest back
                plan.held_by = "scheduler.batching"
                break
            seq = entry.seq
            whole = self.chunking or beyond_budget or self.fits_whole(seq, budget, plan)
            if not whole:
                plan.limit = Limit.TOKEN_BUDGET  # a whole prompt waits for a later step
                break
            share = min(budget, self.prefill_cap) if self.prefill_cap else budget
            if self.admit(seq, max(share, 0)) is None:
                # Head of line does not fit now: wait, do not let others jump it.
                plan.limit = Limit.KV_BLOCKS
                break
            admitted.append(entry)
            if seq.request.req_id in self.state.loading:
                continue  # its prompt's KV is read from a prefill instance first
            take = self.chunk_size(seq, budget, plan) if budget > 0 else 0
            if take:
                self.take_chunk(plan, seq, take)
                budget -= take
        for entry in admitted:
            waiting.remove(entry)
        if waiting and plan.limit == Limit.NONE:
            plan.limit = Limit.POLICY  # the scheduler offered no more of the queue
            plan.held_by = "scheduler.policy"
        return [entry.request for entry in admitted], budget

    def schedule_loaded(self, plan: PlanDraft, budget: int) -> int:
        """Requests whose prompt KV came from a prefill instance run first of the waiting
        ones (vLLM drains its KV-holding queue first): each computes its last prompt
        token, under the sequence limit and the budget. Returns the budget left."""
        state, loaded = self.state, self.state.loaded
        while loaded and budget > 0 and self.admission_limit(budget) == Limit.NONE:
            seq = loaded.pop(0)
            # It joins the running list now, behind everything admitted while its KV
            # was read, and sequence ids are the running list's order: its blocks pass
            # to a new id (shared, then the old id's references dropped).
            self.alloc.fork(seq.seq_id, state.next_seq_id)
            self.alloc.free(seq.seq_id)
            seq.seq_id = state.next_seq_id
            state.next_seq_id += 1
            state.prefilling.append(seq)
            take = self.chunk_size(seq, budget, plan)
            self.take_chunk(plan, seq, take)
            budget -= take
        return budget

    def fits_whole(self, seq: PrefillSeq, budget: int, plan: PlanDraft) -> bool:
        """Without chunking: whether ``seq``'s whole uncached prompt runs this step."""
        cached = self.cached_prefix_tokens(seq.tokens, salt=seq.request.tenant)
        total = seq.tokens.shape[0]
        to_compute = total - min(cached, total - 1)
        return self.whole_prompt_size(to_compute, budget, plan) > 0

    def admission_limit(self, budget: int, beyond_budget: bool = False) -> Limit:
        """Which engine limit forbids admitting one more request now (NONE: none)."""
        if self.state.num_running_seqs() >= self.cfg.max_num_seqs:
            return Limit.MAX_NUM_SEQS
        if budget <= 0 and not beyond_budget:
            return Limit.TOKEN_BUDGET
        return Limit.NONE

    def admit(self, seq: PrefillSeq, budget: int) -> int | None:
        """Allocate ``seq``'s prompt (whole, or its first chunk under first-chunk
        admission); None when it does not fit now (nothing changed)."""
        request, state = seq.request, self.state
        total = seq.tokens.shape[0]
        remaining_out = request.output_len - seq.generated
        tokens = seq.tokens
        # The watermark is waived on an empty replica, and where the rules say.
        watermark = self.rules.watermark_applies(seq.resumed) and state.num_running_seqs() > 0
        if self.first_chunk_admission or watermark:
            cached = self.cached_prefix_tokens(seq.tokens, salt=request.tenant)
            if self.whole_sequence and not self.sequence_fits(seq, cached, watermark):
                return None
            if self.first_chunk_admission and not self.hands_over(request):
                tokens = seq.tokens[: self.first_tokens(total, cached, budget)]
            if watermark:
                # The watermark keeps headroom so running sequences can grow (vLLM's
                # watermark); it is waived on an empty replica, where nothing could grow.
                needed = self.blocks_for(tokens.shape[0] - cached, remaining_out)
                if state.available_blocks() - needed < self.cfg.watermark_blocks:
                    return None
        # Blocks are offered to other requests' prefix lookups only once their chunk is
        # scheduled (see plan()), never while their KV does not exist yet. A refused
        # allocate changes nothing, so trying it is the cheapest "can allocate?".
        try:
            cached = self._allocate(state.next_seq_id, tokens, seq.tokens, request, remaining_out)
        except OutOfBlocks:
            return None
        seq.seq_id = state.next_seq_id
        state.next_seq_id += 1
        seq.held = tokens.shape[0]
        # At least one token is computed so the step has logits to sample from.
        seq.computed = min(cached, total - 1)
        progress = state.in_flight[request.req_id]
        if not seq.resumed:
            progress.cached_prompt_tokens = seq.computed
        if math.isnan(progress.first_scheduled_s):
            progress.first_scheduled_s = self.view.now
        if not self.load_from_peer(seq, cached):
            state.prefilling.append(seq)
        return cached

    def hands_over(self, request: Request) -> bool:
        """Whether ``request``'s prompt KV is on a prefill instance (its whole prompt is
        allocated at admission, as vLLM allocates a remote prefill's)."""
        peer = self.state.peer
        return peer is not None and peer.expects(request.req_id)

    def load_from_peer(self, seq: PrefillSeq, cached: int) -> bool:
        """Whether ``seq``'s prompt KV after its ``cached`` hit is read from a prefill
        instance (its blocks, just allocated, wait in ``state.loading`` until the load is
        done; the peer link is told through ``state.on_peer_load``)."""
        peer, request = self.state.peer, seq.request
        if peer is None or not peer.remote_tokens(request.req_id, seq.tokens.shape[0], cached):
            return False
        self.state.loading[request.req_id] = seq
        self.state.on_peer_load(peer.start_load(request.req_id, cached, seq.tokens.shape[0]))
        return True

    def sequence_fits(self, seq: PrefillSeq, cached: int, watermark: bool) -> bool:
        """Whether all of ``seq``'s blocks (``cached`` tokens of it hit) are free now,
        with the watermark's headroom if it applies (vLLM's full-sequence check)."""
        if not self._can_admit(seq.tokens, salt=seq.request.tenant):
            return False
        if not watermark or not self.cfg.watermark_blocks:
            return True
        needed = self.blocks_for(seq.tokens.shape[0] - cached, 0)
        return self.state.available_blocks() - needed >= self.cfg.watermark_blocks

    def first_tokens(self, total: int, cached: int, budget: int) -> int:
        """The admission policy's share of a prompt to allocate now, checked."""
        take = self.admission.first_tokens(total, cached, budget)
        low = min(cached + 1, total)
        if isinstance(take, bool) or not isinstance(take, int) or not low <= take <= total:
            problem = f"returned {brief(take)} for a {total}-token prompt (expected {low}..{total})"
            raise PolicyFailure("scheduler.admission", "first_tokens()", problem)
        return take

    def blocks_for(self, tokens: int, max_new_tokens: int) -> int:
        if self.reserve is not None:
            return self.reserve(tokens, max_new_tokens)
        return self.alloc.blocks_for_tokens(tokens)
