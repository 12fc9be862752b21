"""The SimPy serving engine: one schedule -> execute -> apply loop per replica.

Iteration-level (continuous) batching as in vLLM: every step, each running sequence in
its decode phase gets one token, and what is left of the token budget goes to prompt
chunks (chunked prefill) of running and newly admitted requests.

Memory follows the allocator contract (backend/base.py): a prompt's slots are allocated
in full when the request is admitted (prefix-cache hits come back from ``allocate``), a
decode appends one slot, and a free-list miss makes the preemption policy pick a victim
whose memory is released by recompute (blocks freed, request re-queued at the front,
re-prefilled from prompt + tokens generated so far) or swap (blocks copied to the CPU
pool; falls back to recompute when the CPU pool is full). A request that can never fit
is rejected with its reason, never retried forever.

Hot path: running decode sequences live in parallel numpy arrays (:class:`DecodeSet`),
so a step costs one vectorised ``append_batch`` plus Python work only for sequences that
finish, start or are preempted — never per token.
"""

from __future__ import annotations

import functools
import math
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import simpy

from backend.base import Allocator, OutOfBlocks
from backend.step import Batch, PrefillChunk
from sim.engine.executor import Executor
from sim.engine.sequences import (
    DecodeSet,
    Limit,
    Moves,
    PrefillSeq,
    StepPlan,
    SwappedRequest,
    WaitingEntry,
    seq_ids,
)
from sim.workload.request import Request


class TokenSource(Protocol):
    """What each sequence generates (the engine feeds these tokens back as decode
    inputs, so prefix caching and multi-turn sessions see them)."""

    def stream_state(self, req_id: int, sample: int) -> int:
        """An int64 key for sample ``sample`` of request ``req_id``, computed once."""
        ...

    def tokens(self, states: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """int32 token ids: the ``positions[i]``-th output token of ``states[i]``."""
        ...


@dataclass(frozen=True)
class EngineConfig:
    """The scheduler knobs of one replica (validated by the scenario schema)."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = True
    watermark_blocks: int = 0  # blocks kept free when admitting new requests
    preemption_mode: str = "recompute"  # or "swap"
    max_model_len: int = 8192
    #: "whole-prompt": a request is admitted only if its whole prompt's KV fits now;
    #: "first-chunk": only its first chunk must fit, later chunks take blocks as they run
    admission: str = "whole-prompt"


class Replica:
    """One serving instance: its own waiting queue, running set, allocator, executor."""

    def __init__(
        self,
        env: simpy.Environment,
        index: int,
        allocator: Allocator,
        executor: Executor,
        scheduler,
        victim_policy,
        config: EngineConfig,
        outputs: TokenSource,
        on_step: Callable[..., None],
        on_done: Callable[[Request], None],
        *,
        batching,
    ):
        self.env = env
        self.index = index
        self.alloc = allocator
        self.executor = executor
        self.scheduler = scheduler
        self.victims = victim_policy
        self.cfg = config
        self.outputs = outputs
        self.on_step = on_step
        self.on_done = on_done

        self.waiting: deque[WaitingEntry] = deque()
        self.prefilling: list[PrefillSeq] = []
        self.decodes = DecodeSet()
        self.swapped: deque[SwappedRequest] = deque()
        self.in_flight: dict[int, Request] = {}  # submitted, neither finished nor rejected
        self.samples_left: dict[int, int] = {}
        self._logged_preemptions = 0  # num_preemptions already in a step's record
        self.num_preemptions = 0
        self.num_swaps_out = 0
        self.num_steps = 0
        self._next_seq_id = 0
        self._wake: simpy.Event | None = None
        # Tokens computed per tenant, kept only for schedulers that ask (fair share).
        self.served: dict[int, int] = {}
        self.track_service = bool(getattr(scheduler, "uses_served_tokens", False))
        # Reserving (contiguous) allocators size a request's region from the start
        # (``reserve(prompt, max_new_tokens)``), so they always admit by whole prompt.
        self.reserve = getattr(allocator, "reservation_size", None)
        # The batching mode composes each step (policies.batching); prompts are cut into
        # chunks only if both the scenario and the mode allow it.
        self.batching = batching
        self.chunking = config.chunked_prefill and batching.chunks_prompts
        # Admitting by first chunk only makes sense when prompts run in chunks.
        self.first_chunk_admission = (
            config.admission == "first-chunk" and self.reserve is None and self.chunking
        )
        self.process = env.process(self.loop())

    # -- what policies may look at (policies/ Protocols; nothing here is mutated) -----
    @property
    def now(self) -> float:
        return self.env.now

    @property
    def outstanding(self) -> int:
        """Requests submitted here and neither finished nor rejected."""
        return len(self.in_flight)

    @property
    def swapped_blocks(self) -> int:
        """Device blocks (the allocator's unit) the swapped-out requests held."""
        return sum(item.num_blocks for item in self.swapped)

    @property
    def kv_usage(self) -> float:
        """Fraction of the device pool in use by live sequences."""
        return self.alloc.usage().used_blocks / self.alloc.num_blocks

    def cached_prefix_tokens(self, request: Request) -> int:
        """Leading prompt tokens of ``request`` this replica's prefix cache holds."""
        return self.alloc.cached_prefix_tokens(request.prompt, salt=request.tenant)

    def served_tokens(self, tenant: int) -> int:
        """Tokens computed for ``tenant`` so far (schedulers with uses_served_tokens)."""
        return self.served.get(tenant, 0)

    def seq_ids_of(self, request: Request) -> list[int]:
        prefills = [s.seq_id for s in self.prefilling if s.request is request]
        return prefills + self.decodes.seq_id[self.decodes.req_id == request.req_id].tolist()

    def running_requests(self) -> list[Request]:
        """Requests with sequences on the device (prefilling or decoding): the
        preemption candidates."""
        req_ids = dict.fromkeys(s.request.req_id for s in self.prefilling)
        req_ids.update(dict.fromkeys(self.decodes.req_id.tolist()))
        return [self.in_flight[req_id] for req_id in req_ids]

    def _running_seqs(self) -> Iterator[tuple[int, int, int]]:
        """(request id, sequence id, tokens generated) of every running sequence."""
        for seq in self.prefilling:
            yield seq.request.req_id, seq.seq_id, seq.generated
        d = self.decodes
        yield from zip(d.req_id.tolist(), d.seq_id.tolist(), d.generated.tolist())

    def blocks_by_request(self) -> dict[int, int]:
        """Device blocks (the allocator's unit) held by each running request."""
        totals: dict[int, int] = {}
        for req_id, seq_id, _ in self._running_seqs():
            totals[req_id] = totals.get(req_id, 0) + self.alloc.held_blocks(seq_id)
        return totals

    def generated_by_request(self) -> dict[int, int]:
        """Output tokens each running request's sequences have produced so far."""
        totals: dict[int, int] = {}
        for req_id, _, generated in self._running_seqs():
            totals[req_id] = totals.get(req_id, 0) + generated
        return totals

    # -- arrivals -------------------------------------------------------------------
    def submit(self, request: Request) -> None:
        """Queue a newly arrived request (called by the router at its arrival time)."""
        request.replica = self.index
        reason = self.never_fits(request)
        if reason:
            self.reject(request, reason)
            return
        seq = PrefillSeq(request, 0, request.prompt, fork_children=request.n - 1)
        self.samples_left[request.req_id] = request.n
        self.in_flight[request.req_id] = request
        self.waiting.append(WaitingEntry(request, seq))
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def never_fits(self, request: Request) -> str:
        """Why ``request`` can never be served by this replica ('' if it can)."""
        prompt, out, n = request.prompt_len, request.output_len, request.n
        if prompt + out > self.cfg.max_model_len:
            limit = self.cfg.max_model_len
            return f"prompt+output {prompt + out} tokens exceed max_model_len {limit}"
        if not self.chunking and prompt > self.cfg.max_num_batched_tokens:
            return (
                f"prompt {prompt} tokens exceed max_num_batched_tokens "
                f"{self.cfg.max_num_batched_tokens} without chunked prefill"
            )
        needed, pool = self.worst_case_blocks(prompt, out, n), self.alloc.num_blocks
        if needed > pool:
            return f"needs {needed} KV blocks, the pool has {pool}"
        return ""

    def worst_case_blocks(self, prompt: int, output: int, n: int) -> int:
        """Blocks (slots for contiguous) a request holds at its largest, alone."""
        if self.reserve is not None:
            return n * self.reserve(prompt, output)
        bs = self.alloc.block_size
        # The last sampled token is never written, so KV peaks at prompt + output - 1.
        peak = prompt + max(output - 1, 0)
        shared = prompt // bs if n > 1 else 0  # full prompt blocks are shared by forks
        return shared + n * (math.ceil(peak / bs) - shared)

    def reject(self, request: Request, reason: str) -> None:
        request.rejected_reason = reason
        self.finish_request(request)

    def finish_request(self, request: Request) -> None:
        self.samples_left.pop(request.req_id, None)
        self.in_flight.pop(request.req_id, None)
        self.on_done(request)

    # -- the loop ---------------------------------------------------------------------
    def has_work(self) -> bool:
        return bool(self.waiting or self.prefilling or len(self.decodes) or self.swapped)

    def loop(self):
        while True:
            if not self.has_work():
                self._wake = self.env.event()
                yield self._wake
                self._wake = None
                continue
            batch, plan = self.schedule()
            if batch.batch_size == 0 and not batch.swap_out:
                self.unblock()
                continue
            duration = self.executor.execute(batch)
            yield self.env.timeout(duration)
            self.apply(plan)
            self.num_steps += 1
            self.on_step(self, batch, duration, plan)

    def unblock(self) -> None:
        """Nothing could be scheduled although work is queued: with nothing running,
        the head of the queue can never be admitted, so it is rejected (liveness)."""
        if self.prefilling and not len(self.decodes):
            # First-chunk admission let partial prompts fill the pool: free some. There
            # is no step to log it in, so the next step's record carries it.
            self.make_room(None)
            return
        if self.swapped and not (self.prefilling or len(self.decodes)):
            # Bring one swapped request back by recompute instead of waiting forever.
            self.resume_by_recompute(self.swapped.popleft())
            return
        if self.waiting and not (self.prefilling or len(self.decodes)):
            entry = self.waiting.popleft()
            self.reject(entry.request, "cannot be admitted even with an empty replica")

    # -- scheduling ---------------------------------------------------------------------
    def schedule(self) -> tuple[Batch, StepPlan]:
        plan = StepPlan()
        moves = Moves()
        self.swap_in_waiting(moves)
        step = _StepBuilder(self, plan, moves)
        self.batching.compose(step)
        decode_ids, decode_ctx, decode_tokens = step.decode_arrays
        chunks = tuple(
            PrefillChunk(s.seq_id, s.computed, s.tokens[s.computed : s.computed + n])
            for s, n in plan.chunks
        )
        for seq, take in plan.chunks:
            self.alloc.mark_computed(seq.seq_id, seq.computed + take)
        # Preemptions made while planning, and any made between steps (see unblock).
        plan.num_preempted = self.num_preemptions - self._logged_preemptions
        self._logged_preemptions = self.num_preemptions
        if plan.num_preempted or self.swapped:
            plan.limit = Limit.KV_BLOCKS  # memory is what binds, whatever else also did
        batch = Batch(
            chunks,
            decode_ids,
            decode_ctx,
            decode_tokens,
            tuple(moves.copies),
            tuple(moves.swap_out),
            tuple(moves.swap_in),
        )
        return batch, plan

    def available_blocks(self) -> int:
        usage = self.alloc.usage()
        return usage.free_blocks + usage.cached_blocks

    def schedule_decodes(self, plan: StepPlan, moves: Moves):
        """Give every decoding sequence one slot, preempting on a free-list miss."""
        d = self.decodes
        while len(d):
            # The newest sampled token (position generated - 1) is fed and gets its slot.
            tokens = self.outputs.tokens(d.stream, d.generated - 1)
            try:
                # Refused appends change nothing (OutOfBlocks is raised before any
                # mutation), so trying first costs one call on the common path.
                moves.copies.extend(self.alloc.append_batch(d.seq_id, tokens))
                break
            except OutOfBlocks:
                self.make_room(moves)
        plan.decode_rows = len(d)
        if not plan.decode_rows:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, np.zeros(0, dtype=np.int32)
        d.context += 1
        return d.seq_id.copy(), d.context.copy(), tokens

    def schedule_running_prefills(self, plan: StepPlan, budget: int) -> int:
        for seq in self.prefilling:
            if budget <= 0:
                break
            take = self.hold_slots(seq, self.chunk_size(seq, budget, plan))
            if not take:
                if self.first_chunk_admission:
                    continue  # out of blocks for this one; others may still fit
                break
            plan.chunks.append((seq, take))
            budget -= take
        return budget

    def hold_slots(self, seq: PrefillSeq, take: int) -> int:
        """Make the allocator hold slots for the next ``take`` tokens of ``seq``; returns
        how many it could (fewer when blocks run out under first-chunk admission)."""
        missing = seq.computed + take - seq.held
        if missing <= 0:
            return take
        bs = self.alloc.block_size
        room = (-seq.held) % bs + self.available_blocks() * bs
        grow = min(missing, room)
        if grow > 0:
            self.alloc.append(seq.seq_id, seq.tokens[seq.held : seq.held + grow])
            seq.held += grow
        return min(take, seq.held - seq.computed)

    def chunk_size(self, seq: PrefillSeq, budget: int, plan: StepPlan) -> int:
        """Prompt tokens of ``seq`` to compute this step (0: none)."""
        return self.whole_prompt_size(seq.tokens.shape[0] - seq.computed, budget, plan)

    def whole_prompt_size(self, remaining: int, budget: int, plan: StepPlan) -> int:
        """Tokens of a prompt with ``remaining`` to compute that this step takes: up to
        the budget with chunking; else all of them or none, except that a prompt longer
        than the budget (a resumed request's prompt + outputs) may run alone, so that it
        cannot wait forever."""
        if self.chunking or remaining <= budget:
            return min(remaining, budget)
        alone = not plan.chunks and not plan.decode_rows
        return remaining if alone else 0

    def num_running_seqs(self) -> int:
        return len(self.decodes) + len(self.prefilling)

    def admit_waiting(
        self,
        plan: StepPlan,
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
        if not self.waiting:
            return [], budget
        plan.limit = self.admission_limit(budget, beyond_budget)
        if plan.limit != Limit.NONE:
            return [], budget  # (before asking the scheduler to order a long queue)
        admitted = []
        for entry in self.scheduler.order(self.waiting, self):
            plan.limit = self.admission_limit(budget, beyond_budget)
            if plan.limit != Limit.NONE:
                break
            if only is not None and not only(entry.request):
                plan.limit = Limit.POLICY  # the batching mode holds the rest back
                break
            seq = entry.seq
            whole = self.chunking or beyond_budget or self.fits_whole(seq, budget, plan)
            if not whole:
                plan.limit = Limit.TOKEN_BUDGET  # a whole prompt waits for a later step
                break
            cached = self.admit(seq, max(budget, 0))
            if cached is None:
                # Head of line does not fit now: wait, do not let others jump it.
                plan.limit = Limit.KV_BLOCKS
                break
            admitted.append(entry)
            take = self.chunk_size(seq, budget, plan) if budget > 0 else 0
            if take:
                plan.chunks.append((seq, take))
                budget -= take
        for entry in admitted:
            self.waiting.remove(entry)
        if self.waiting and plan.limit == Limit.NONE:
            plan.limit = Limit.POLICY  # the scheduler offered no more of the queue
        return [entry.request for entry in admitted], budget

    def fits_whole(self, seq: PrefillSeq, budget: int, plan: StepPlan) -> bool:
        """Without chunking: whether ``seq``'s whole uncached prompt runs this step."""
        cached = self.alloc.cached_prefix_tokens(seq.tokens, salt=seq.request.tenant)
        total = seq.tokens.shape[0]
        to_compute = total - min(cached, total - 1)
        return self.whole_prompt_size(to_compute, budget, plan) > 0

    def admission_limit(self, budget: int, beyond_budget: bool = False) -> Limit:
        """Which engine limit forbids admitting one more request now (NONE: none)."""
        if self.num_running_seqs() >= self.cfg.max_num_seqs:
            return Limit.MAX_NUM_SEQS
        if budget <= 0 and not beyond_budget:
            return Limit.TOKEN_BUDGET
        return Limit.NONE

    def admit(self, seq: PrefillSeq, budget: int) -> int | None:
        """Allocate ``seq``'s prompt (whole, or its first chunk under first-chunk
        admission); None when it does not fit now (nothing changed)."""
        request = seq.request
        total = seq.tokens.shape[0]
        remaining_out = request.output_len - seq.generated
        tokens = seq.tokens
        # The watermark is waived for resumed requests and on an empty replica.
        watermark = not seq.resumed and self.num_running_seqs() > 0
        if self.first_chunk_admission or watermark:
            cached = self.alloc.cached_prefix_tokens(seq.tokens, salt=request.tenant)
            if self.first_chunk_admission:
                tokens = seq.tokens[: min(total, cached + max(budget, 1))]
            if watermark:
                # The watermark keeps headroom so running sequences can grow (vLLM's
                # watermark); it is waived on an empty replica, where nothing could grow.
                needed = self.blocks_for(tokens.shape[0] - cached, remaining_out)
                if self.available_blocks() - needed < self.cfg.watermark_blocks:
                    return None
        # Blocks are offered to other requests' prefix lookups only once their chunk is
        # scheduled (see schedule()), never while their KV does not exist yet. A refused
        # allocate changes nothing, so trying it is the cheapest "can allocate?".
        try:
            cached = self.alloc.allocate(
                self._next_seq_id,
                tokens,
                salt=request.tenant,
                max_new_tokens=remaining_out,
                computed_tokens=0,
            )
        except OutOfBlocks:
            return None
        seq.seq_id = self._next_seq_id
        self._next_seq_id += 1
        seq.held = tokens.shape[0]
        # At least one token is computed so the step has logits to sample from.
        seq.computed = min(cached, total - 1)
        if not seq.resumed:
            request.cached_prompt_tokens = seq.computed
        if math.isnan(request.first_scheduled_s):
            request.first_scheduled_s = self.env.now
        self.prefilling.append(seq)
        return cached

    def blocks_for(self, tokens: int, max_new_tokens: int) -> int:
        if self.reserve is not None:
            return self.reserve(tokens, max_new_tokens)
        return math.ceil(tokens / self.alloc.block_size)

    # -- preemption and swap --------------------------------------------------------------
    def make_room(self, moves: Moves | None) -> None:
        """Free device memory by one preemption (the one place preemptions are counted).

        The victim request is swapped out when the mode is swap, ``moves`` can carry the
        copies (a step is being planned) and the CPU pool has room; otherwise its
        sequences are recomputed. When a single request holds all the memory, only its
        newest sequence is recomputed: swapping or recomputing the whole request would
        bring it back to the same state (a livelock), while its other samples can finish
        with the memory they hold."""
        self.num_preemptions += 1
        running = self.running_requests()
        if len(running) == 1:
            (request,) = running
            if len(self.seq_ids_of(request)) > 1:
                request.num_preemptions += 1
                self.release(request, *self.detach_newest(request))
                return
        victim = self.victims.pick(running, _VictimView(self))
        victim.num_preemptions += 1
        swap = moves is not None and self.cfg.preemption_mode == "swap"
        if not (swap and self.try_swap_out(victim, moves)):
            self.release(victim, *self.detach(victim))

    def detach(self, victim: Request) -> tuple[list[PrefillSeq], dict[str, np.ndarray]]:
        """Take ``victim``'s sequences out of the running set (allocator untouched)."""
        prefills = [s for s in self.prefilling if s.request is victim]
        self.prefilling = [s for s in self.prefilling if s.request is not victim]
        return prefills, self.decodes.take(self.decodes.req_id == victim.req_id)

    def detach_newest(self, request: Request) -> tuple[list[PrefillSeq], dict[str, np.ndarray]]:
        """Take ``request``'s newest sequence out of the running set (its others stay)."""
        rows = self.decodes.req_id == request.req_id
        if rows.any():
            return [], self.decodes.take(self.decodes.seq_id == self.decodes.seq_id[rows].max())
        newest = next(s for s in reversed(self.prefilling) if s.request is request)
        self.prefilling.remove(newest)
        return [newest], self.decodes.take(np.zeros(len(self.decodes), dtype=bool))

    def release(self, request: Request, prefills, decodes) -> None:
        """Free detached sequences (on the device or swapped out) and re-queue them."""
        for seq_id in seq_ids(prefills, decodes):
            self.alloc.free(seq_id)
        self.requeue_for_recompute(request, prefills, decodes)

    def try_swap_out(self, victim: Request, moves: Moves) -> bool:
        """Swap every sequence of ``victim`` to the CPU pool; False (nothing changed) when
        the pool has no room for all of them."""
        victim_seqs = self.seq_ids_of(victim)
        if not self.alloc.can_swap_out(*victim_seqs):
            return False
        blocks = sum(self.alloc.held_blocks(s) for s in victim_seqs)
        for seq_id in victim_seqs:
            moves.swap_out.extend(self.alloc.swap_out(seq_id))
        self.swapped.append(SwappedRequest(victim, *self.detach(victim), blocks))
        self.num_swaps_out += 1
        return True

    def requeue_for_recompute(self, request, prefills, decodes) -> None:
        """Put the victim's sequences back at the front of the queue, to be re-prefilled
        from prompt + the tokens each has generated so far."""
        entries = []
        for seq in prefills:
            fresh = PrefillSeq(
                request, seq.sample, seq.tokens, seq.generated, True, seq.fork_children
            )
            entries.append(WaitingEntry(request, fresh))
        for sample, generated in zip(decodes["sample"].tolist(), decodes["generated"].tolist()):
            entries.append(self.recompute_entry(request, sample, generated))
        self.waiting.extendleft(reversed(entries))

    def recompute_entry(self, request: Request, sample: int, generated: int) -> WaitingEntry:
        """A sample that lost its KV, queued to re-prefill prompt + its ``generated``
        output tokens."""
        tokens = self.sequence_tokens(request, sample, generated)
        return WaitingEntry(request, PrefillSeq(request, sample, tokens, generated, resumed=True))

    def sequence_tokens(self, request: Request, sample: int, generated: int) -> np.ndarray:
        state = np.asarray([self.outputs.stream_state(request.req_id, sample)], dtype=np.int64)
        outputs = self.outputs.tokens(state, np.arange(generated, dtype=np.int64))
        return np.concatenate([request.prompt, outputs.astype(request.prompt.dtype)])

    def resume_by_recompute(self, item: SwappedRequest) -> None:
        self.release(item.request, item.prefills, item.decodes)

    def swap_in_waiting(self, moves: Moves) -> None:
        """Swapped requests resume, in order, before any new request is admitted."""
        while self.swapped:
            item = self.swapped[0]
            item_seqs = seq_ids(item.prefills, item.decodes)
            if item.num_blocks + len(self.decodes) > self.available_blocks():
                return
            if self.num_running_seqs() + len(item_seqs) > self.cfg.max_num_seqs:
                return
            if not self.alloc.can_swap_in(*item_seqs):
                return
            for seq_id in item_seqs:
                moves.swap_in.extend(self.alloc.swap_in(seq_id))
            self.swapped.popleft()
            self.prefilling.extend(item.prefills)
            self.decodes.extend(item.decodes)

    # -- applying a finished step ---------------------------------------------------------
    def apply(self, plan: StepPlan) -> None:
        now = self.env.now
        if self.track_service:
            self.count_service(plan)
        self.apply_decodes(plan, now)
        new_rows: list[tuple[int, ...]] = []
        for seq, take in plan.chunks:
            seq.computed += take
            if seq.computed == seq.tokens.shape[0]:
                self.complete_prefill(seq, now, new_rows)
        self.decodes.extend(new_rows)

    def count_service(self, plan: StepPlan) -> None:
        tenants = self.decodes.tenant[: plan.decode_rows]
        for tenant, count in zip(*np.unique(tenants, return_counts=True)):
            self.served[int(tenant)] = self.served.get(int(tenant), 0) + int(count)
        for seq, take in plan.chunks:
            tenant = seq.request.tenant
            self.served[tenant] = self.served.get(tenant, 0) + take

    def apply_decodes(self, plan: StepPlan, now: float) -> None:
        rows = plan.decode_rows
        if not rows:
            return
        d = self.decodes
        d.generated[:rows] += 1
        done = np.zeros(len(d), dtype=bool)
        done[:rows] = d.generated[:rows] >= d.target[:rows]
        if not done.any():
            return
        finished = d.take(done)
        for seq_id, req_id in zip(finished["seq_id"].tolist(), finished["req_id"].tolist()):
            self.alloc.free(seq_id)
            self.sample_done(self.in_flight[req_id], now)

    def complete_prefill(self, seq: PrefillSeq, now: float, new_rows: list) -> None:
        """The prompt's last chunk ran: its logits gave one more token."""
        self.prefilling.remove(seq)
        request = seq.request
        if math.isnan(request.first_token_s):
            request.first_token_s = now
        generated = seq.generated + 1
        samples = [seq.sample] + [seq.sample + 1 + i for i in range(seq.fork_children)]
        if generated >= request.output_len:
            # Every sample's only token came from these logits: nothing left to fork.
            self.alloc.free(seq.seq_id)
            for _ in samples:
                self.sample_done(request, now)
            return
        context = seq.tokens.shape[0]
        for sample in samples:
            seq_id = seq.seq_id if sample == seq.sample else self.fork(seq, sample)
            if seq_id is None:
                continue  # could not fork: that sample was re-queued for recompute
            stream = self.outputs.stream_state(request.req_id, sample)
            new_rows.append(
                (
                    seq_id,
                    request.req_id,
                    sample,
                    stream,
                    generated,
                    request.output_len,
                    context,
                    request.tenant,
                )
            )

    def fork(self, parent: PrefillSeq, sample: int) -> int | None:
        child = self._next_seq_id
        self._next_seq_id += 1
        try:
            # Paged forks share blocks (copy-on-write later). A contiguous baseline copies
            # the region; its moves are charged to nothing, a simplification.
            self.alloc.fork(parent.seq_id, child)
        except OutOfBlocks:
            entry = self.recompute_entry(parent.request, sample, parent.generated + 1)
            self.waiting.appendleft(entry)
            return None
        return child

    def sample_done(self, request: Request, now: float) -> None:
        left = self.samples_left[request.req_id] - 1
        self.samples_left[request.req_id] = left
        if left == 0:
            request.finish_s = now
            request.generated = request.output_len * request.n
            self.finish_request(request)

    def next_request_tokens(self) -> int:
        """Slots the head of the queue would need (for external fragmentation)."""
        if not self.waiting:
            return 0
        seq = self.waiting[0].seq
        remaining_out = seq.request.output_len - seq.generated
        return self.blocks_for(seq.tokens.shape[0], remaining_out) * self.alloc.block_size


class _StepBuilder:
    """The moves a batching mode composes a step from (policies.batching.StepBuilder);
    it keeps the step's token budget. Each move runs at most once per step."""

    _NO_DECODES = (
        np.zeros(0, dtype=np.int64),
        np.zeros(0, dtype=np.int64),
        np.zeros(0, dtype=np.int32),
    )

    def __init__(self, replica: Replica, plan: StepPlan, moves: Moves):
        self._replica, self._plan, self._moves = replica, plan, moves
        self._budget = replica.cfg.max_num_batched_tokens
        self.decode_arrays = self._NO_DECODES
        self._done: set[str] = set()

    def _once(self, move: str) -> None:
        if move in self._done:
            raise RuntimeError(f"batching mode called step.{move}() twice in one step")
        self._done.add(move)

    def decodes(self) -> None:
        self._once("decodes")
        self.decode_arrays = self._replica.schedule_decodes(self._plan, self._moves)
        self._budget -= self.decode_arrays[0].shape[0]

    def running_prefills(self) -> None:
        self._once("running_prefills")
        self._budget = self._replica.schedule_running_prefills(self._plan, self._budget)

    def admit(
        self, only: Callable[[Request], bool] | None = None, beyond_budget: bool = False
    ) -> list[Request]:
        self._once("admit")
        admitted, self._budget = self._replica.admit_waiting(
            self._plan, self._budget, only, beyond_budget
        )
        return admitted

    @property
    def has_prefill_chunks(self) -> bool:
        return bool(self._plan.chunks)

    @property
    def replica_empty(self) -> bool:
        replica = self._replica
        return not (replica.prefilling or len(replica.decodes) or replica.swapped)


class _VictimView:
    """What a victim policy reads (policies.preemption.VictimView). Each per-request
    total is computed for all running requests at once, on first use, so a pick costs
    O(running sequences) rather than a scan per candidate."""

    def __init__(self, replica: Replica):
        self.now = replica.now
        self._replica = replica

    @functools.cached_property
    def _blocks(self) -> dict[int, int]:
        return self._replica.blocks_by_request()

    @functools.cached_property
    def _generated(self) -> dict[int, int]:
        return self._replica.generated_by_request()

    def blocks_held(self, request: Request) -> int:
        return self._blocks.get(request.req_id, 0)

    def generated_tokens(self, request: Request) -> int:
        return self._generated.get(request.req_id, 0)


class Cluster:
    """Replicas behind a router, fed by one arrival process."""

    def __init__(self, env: simpy.Environment, replicas: Sequence[Replica], router):
        self.env = env
        self.replicas = list(replicas)
        self.router = router

    def arrivals(self, requests: Sequence[Request]):
        """SimPy process: hand each request to a replica at its arrival time."""
        for request in requests:
            delay = request.arrival_s - self.env.now
            # now + (arrival - now) can round one ulp below arrival; step up so that no
            # request is ever scheduled before it arrived.
            while self.env.now + delay < request.arrival_s:
                delay = math.nextafter(delay, math.inf)
            if delay > 0:
                yield self.env.timeout(delay)
            chosen = self.router.route(request, self.replicas, self.env.now)
            if not 0 <= chosen < len(self.replicas):
                raise RuntimeError(f"router returned replica {chosen} of {len(self.replicas)}")
            self.replicas[chosen].submit(request)
