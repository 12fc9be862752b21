"""The SimPy serving engine: one schedule -> execute -> apply loop per replica.

Iteration-level (continuous) batching as in vLLM: every step, each running sequence in
its decode phase gets one token, and what is left of the token budget goes to prompt
chunks (chunked prefill) of running and newly admitted requests; the batching mode
(policies.batching) may compose steps otherwise.

A replica wires its parts around one :class:`~sim.engine.state.ReplicaState`: the
planner (:mod:`.scheduling`) composes each step, memory (:mod:`.memory`) preempts and
swaps, completion (:mod:`.completion`) applies results. The replica itself admits
arrivals, rejects what can never fit (with its reason, never retried forever), runs the
loop and emits one :class:`StepRecord` per step and one :class:`RequestOutcome` per
request.

Hot path: running decode sequences live in parallel numpy arrays (``DecodeSet``), so a
step costs one vectorised ``append_batch`` plus Python work only for sequences that
finish, start or are preempted — never per token.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import simpy

from backend.base import Allocator
from backend.step import Batch
from sim.engine.completion import Completion
from sim.engine.config import EngineConfig
from sim.engine.executor import Executor, TokenSource
from sim.engine.memory import Memory
from sim.engine.records import RequestOutcome, StepRecord
from sim.engine.scheduling import StepPlanner
from sim.engine.sequences import PrefillSeq, StepPlan, WaitingEntry
from sim.engine.state import ReplicaState, RequestProgress
from sim.workload.request import Request


class Replica:
    """One serving instance: its own waiting queue, running set, allocator, executor.

    ``on_step(record)`` is called after every step, ``on_done(outcome)`` once per
    request that finishes or is rejected; :meth:`unfinished_outcomes` gives the rest."""

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
        on_step: Callable[[StepRecord], None],
        on_done: Callable[[RequestOutcome], None],
        *,
        batching,
    ):
        self.env = env
        self.index = index
        self.alloc = allocator
        self.executor = executor
        self.cfg = config
        self.on_step = on_step
        self.on_done = on_done
        self.num_steps = 0
        self._wake: simpy.Event | None = None

        self.state = ReplicaState(allocator)
        clock = self._now
        self.memory = Memory(self.state, config, victim_policy, outputs, clock)
        self.planner = StepPlanner(
            self.state, config, self.memory, outputs, scheduler, batching, self, clock
        )
        track = bool(getattr(scheduler, "uses_served_tokens", False))
        self.completion = Completion(
            self.state, self.memory, outputs, self._finished, track_service=track
        )
        self.process = env.process(self.loop())

    def _now(self) -> float:
        return self.env.now

    # -- what policies may look at (policies/ Protocols; nothing here is mutated) -----
    @property
    def now(self) -> float:
        return self.env.now

    @property
    def outstanding(self) -> int:
        """Requests submitted here and neither finished nor rejected."""
        return len(self.state.in_flight)

    @property
    def swapped_blocks(self) -> int:
        """Device blocks (the allocator's unit) the swapped-out requests held."""
        return self.state.swapped_blocks()

    @property
    def kv_usage(self) -> float:
        """Fraction of the device pool in use by live sequences."""
        return self.alloc.usage().used_blocks / self.alloc.num_blocks

    def cached_prefix_tokens(self, request: Request) -> int:
        """Leading prompt tokens of ``request`` this replica's prefix cache holds."""
        return self.alloc.cached_prefix_tokens(request.prompt, salt=request.tenant)

    def served_tokens(self, tenant: int) -> int:
        """Tokens computed for ``tenant`` so far (schedulers with uses_served_tokens)."""
        return self.completion.served.get(tenant, 0)

    def running_requests(self) -> list[Request]:
        """Requests with sequences on the device (the preemption candidates)."""
        return self.state.running_requests()

    def has_work(self) -> bool:
        return self.state.has_work()

    @property
    def num_preemptions(self) -> int:
        return self.state.num_preemptions

    @property
    def num_swaps_out(self) -> int:
        return self.state.num_swaps_out

    # -- arrivals -------------------------------------------------------------------
    def submit(self, request: Request) -> None:
        """Queue a newly arrived request (called by the router at its arrival time)."""
        progress = RequestProgress(request, self.index, samples_left=request.n)
        reason = self.never_fits(request)
        if reason:
            self.on_done(progress.outcome(math.nan, 0, reason))
            return
        seq = PrefillSeq(request, 0, request.prompt, fork_children=request.n - 1)
        self.state.in_flight[request.req_id] = progress
        self.state.waiting.append(WaitingEntry(request, seq))
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def never_fits(self, request: Request) -> str:
        """Why ``request`` can never be served by this replica ('' if it can)."""
        prompt, out, n = request.prompt_len, request.output_len, request.n
        if prompt + out > self.cfg.max_model_len:
            limit = self.cfg.max_model_len
            return f"prompt+output {prompt + out} tokens exceed max_model_len {limit}"
        if not self.planner.chunking and prompt > self.cfg.max_num_batched_tokens:
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
        if self.planner.reserve is not None:
            return n * self.planner.reserve(prompt, output)
        bs = self.alloc.block_size
        # The last sampled token is never written, so KV peaks at prompt + output - 1.
        peak = prompt + max(output - 1, 0)
        shared = prompt // bs if n > 1 else 0  # full prompt blocks are shared by forks
        return shared + n * (math.ceil(peak / bs) - shared)

    # -- departures -----------------------------------------------------------------
    def reject(self, request: Request, reason: str) -> None:
        progress = self.state.in_flight.pop(request.req_id)
        self.on_done(progress.outcome(math.nan, 0, reason))

    def _finished(self, req_id: int, now: float) -> None:
        """The last sample of ``req_id`` is done."""
        progress = self.state.in_flight.pop(req_id)
        request = progress.request
        self.on_done(progress.outcome(now, request.output_len * request.n, ""))

    def unfinished_outcomes(self, reason: str) -> list[RequestOutcome]:
        """Outcomes of the requests still in flight (the run stopped), with what their
        running samples generated so far."""
        generated = self.state.generated_by_request()
        return [
            progress.outcome(math.nan, generated.get(req_id, 0), reason)
            for req_id, progress in self.state.in_flight.items()
        ]

    # -- the loop ---------------------------------------------------------------------
    def loop(self):
        while True:
            if not self.state.has_work():
                self._wake = self.env.event()
                yield self._wake
                self._wake = None
                continue
            batch, plan = self.planner.plan()
            if batch.batch_size == 0 and not batch.swap_out:
                self.unblock()
                continue
            duration = self.executor.execute(batch)
            yield self.env.timeout(duration)
            self.completion.apply(plan, self.env.now)
            self.num_steps += 1
            self.on_step(self.step_record(batch, duration, plan))

    def unblock(self) -> None:
        """Nothing could be scheduled although work is queued: with nothing running,
        the head of the queue can never be admitted, so it is rejected (liveness)."""
        state = self.state
        running = state.prefilling or len(state.decodes)
        if state.prefilling and not len(state.decodes):
            # First-chunk admission let partial prompts fill the pool: free some. There
            # is no step to log it in, so the next step's record carries it.
            self.memory.make_room(None)
            return
        if state.swapped and not running:
            # Bring one swapped request back by recompute instead of waiting forever.
            self.memory.resume_by_recompute(state.swapped.popleft())
            return
        if state.waiting and not running:
            entry = state.waiting.popleft()
            self.reject(entry.request, "cannot be admitted even with an empty replica")

    # -- records ----------------------------------------------------------------------
    def step_record(self, batch: Batch, duration: float, plan: StepPlan) -> StepRecord:
        """The record of a step just applied (memory as it stands after it)."""
        usage = self.alloc.usage(self.next_request_tokens())
        return StepRecord(
            self.env.now - duration,
            self.index,
            duration,
            batch.batch_size,
            batch.num_prefill_tokens,
            batch.num_decode_tokens,
            usage.used_blocks,
            usage.cached_blocks,
            usage.free_blocks,
            usage.token_slots,
            usage.reserved_slots,
            usage.internal_frag_slots,
            usage.external_frag_slots,
            usage.free_slots,
            self.state.swapped_blocks(),
            len(self.state.waiting),
            plan.num_preempted,
            plan.limit,
        )

    def next_request_tokens(self) -> int:
        """Slots the head of the queue would need (for external fragmentation)."""
        if not self.state.waiting:
            return 0
        seq = self.state.waiting[0].seq
        remaining_out = seq.request.output_len - seq.generated
        return self.planner.blocks_for(seq.tokens.shape[0], remaining_out) * self.alloc.block_size
