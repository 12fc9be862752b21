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

import numpy as np
import simpy

from backend.base import Allocator
from backend.capabilities import PeaksWithWindows
from backend.connectors.contract import KVConnector
from backend.connectors.seam import ConnectorSeam
from backend.step import Batch
from sim.engine.completion import Completion
from sim.engine.config import EngineConfig, ReplicaPolicies
from sim.engine.deadlines import TIMED_OUT, Deadlines, abort
from sim.engine.executor import Executor, TokenSource
from sim.engine.fast_forward import FastForward, InFlight, StepSink, StretchParts, next_delay
from sim.engine.memory import Memory
from sim.engine.planning.planner import StepPlanner
from sim.engine.policy_guard import MAX_IDLE_STEPS, StuckRun, check_duration
from sim.engine.records import RequestOutcome, StepRecord
from sim.engine.replica_state import StepPlan, new_entries
from sim.engine.state import ReplicaState, RequestProgress
from sim.engine.unblock import unblock
from sim.engine.view import EngineView
from sim.workload.request import Request


def batch_counts(batch: Batch) -> tuple[int, int, int]:
    """(batch size, prefill tokens, decode tokens) of a step: read once, as the loop,
    the watchdog and the step record each need them (the prefill count sums the chunks)."""
    decode_tokens = batch.decode_seq_ids.shape[0]
    return (
        len(batch.prefills) + decode_tokens,
        sum(chunk.token_ids.shape[0] for chunk in batch.prefills),
        decode_tokens,
    )


class Replica:
    """One serving instance: its own waiting queue, running set, allocator, executor.

    ``steps`` gets every step's record, ``on_done(outcome)`` is called once per
    request that finishes or is rejected; :meth:`unfinished_outcomes` gives the rest.
    With ``fast_forward`` (default) decode stretches take one event (sim/engine/fast_forward.py);
    the outputs are the same either way.
    Policies get :attr:`view` (read-only), never the replica."""

    def __init__(
        self,
        env: simpy.Environment,
        index: int,
        allocator: Allocator,
        executor: Executor,
        policies: ReplicaPolicies,
        config: EngineConfig,
        outputs: TokenSource,
        steps: StepSink,
        on_done: Callable[[RequestOutcome], None],
        *,
        fast_forward: bool = True,
        connector: KVConnector | None = None,
    ):
        self.env = env
        self.index = index
        self.alloc = allocator
        self._executor = executor
        self._cfg = config
        self._steps = steps
        self._on_done = on_done
        self._tokens = outputs
        self.num_steps = 0
        self._idle_steps = 0  # steps in a row that computed no token (the watchdog)
        self._evictions_recorded = 0  # the allocator's evictions up to the last record
        self._wake: simpy.Event | None = None
        self._windowed = isinstance(allocator, PeaksWithWindows)  # (checked once: costly)

        self.connector = connector  # (the offload tiers: their figures go in the summary)
        seam = ConnectorSeam(allocator, connector) if connector is not None else None
        self._state = ReplicaState(allocator, seam)
        self.view = EngineView(self._state, self._now, index)
        self._memory = Memory(self._state, config, policies, outputs, self.view)
        self._planner = StepPlanner(self._state, config, policies, self._memory, outputs, self.view)
        self._completion = Completion(
            self._state,
            self._memory,
            outputs,
            self._finished,
            policies.served_tokens,
            lag_frees=config.rules.frees_lag(config.async_scheduling),
        )
        parts = StretchParts(
            index,
            self._state,
            self._planner,
            self._memory,
            self._completion.gaps,
            executor,
            outputs,
            policies,
            steps,
        )
        self._fast = FastForward(parts, fast_forward)
        self.horizon: Callable[[], float] = lambda: math.inf  # set by the cluster
        self._deadlines = Deadlines(config.request_timeout_s)
        self._in_flight: InFlight | None = None  # the step a cut stretch left running
        self._state.before_read = self.settle
        self.process = env.process(self._loop())

    @property
    def executor(self) -> Executor:
        """What prices (or runs) this replica's steps."""
        return self._executor

    def _now(self) -> float:
        return self.env.now

    # -- counters and checks (tests, the runner) -----------------------------------------
    @property
    def num_preemptions(self) -> int:
        return self._state.num_preemptions

    @property
    def fast_forwarded_steps(self) -> int:
        """Steps of :attr:`num_steps` that were applied as part of a decode stretch."""
        return self._fast.steps_forwarded

    @property
    def num_swaps_out(self) -> int:
        return self._state.num_swaps_out

    @property
    def state(self) -> ReplicaState:
        """The live state, for readers that record decisions (the parity replay's
        executor); never mutated from outside the replica's parts."""
        return self._state

    def has_work(self) -> bool:
        """Anything queued, running or swapped out."""
        return self._state.has_work()

    def token_gaps(self) -> tuple[np.ndarray, np.ndarray]:
        """Inter-token latencies so far: (gap seconds, tokens with that gap)."""
        self.settle()
        return self._completion.gaps.entries()

    def settle(self) -> None:
        """Bring a decode stretch in progress to the present, before anything outside
        the replica reads or changes it: its steps that ended are applied and recorded,
        the one running is planned and finishes as an ordinary step."""
        if self._fast.current is None:
            return
        applied, self._in_flight = self._fast.cut(self.env.now)
        self._count_steps(applied)
        self.process.interrupt("stretch cut")  # it waits for the stretch's end

    def _count_steps(self, steps: int) -> None:
        if steps:
            self.num_steps += steps
            self._idle_steps = 0

    # -- arrivals -------------------------------------------------------------------
    def submit(self, request: Request) -> None:
        """Queue a newly arrived request (called by the router at its arrival time)."""
        self.settle()
        progress = RequestProgress(request, self.index, samples_left=request.n)
        reason = self.never_fits(request)
        if reason:
            self._on_done(progress.outcome(math.nan, 0, reason))
            return
        progress.prompt = self._tokens.prompt(request)
        self._state.in_flight[request.req_id] = progress
        self._deadlines.add(request)
        entries = new_entries(request, progress.prompt, fan_out=self._cfg.rules.fan_out_samples)
        if self._cfg.async_scheduling and self._wake is None:
            # A step is running, and the next one is already scheduled (vLLM's async
            # scheduling plans a step while the one before it runs).
            self._state.arriving.extend(entries)
            return
        self._state.waiting.extend(entries)
        self._wake_up()

    # -- prefill/decode hand-offs (sim/engine/disaggregation.py) -------------------------
    def submit_to_hand_off(self, request: Request) -> None:
        """Queue ``request`` to be prefilled here and read by a decode instance: its
        blocks stay held once it finishes, until :meth:`release_held`."""
        self._state.peer.send_later(request.req_id)
        self.submit(request)

    def submit_handed_off(self, request: Request, source: int) -> None:
        """Queue ``request``, whose prompt KV is on instance ``source``: read once it is
        admitted (its blocks allocated), its last prompt token computed here."""
        self._state.peer.expect(request.req_id, source)
        self.submit(request)

    def kv_arrived(self, req_id: int) -> None:
        """The prompt KV of ``req_id`` (loading) is all here: its blocks are published
        and it is scheduled before the waiting queue, its last prompt token to compute
        (vLLM recomputes it so the next token can be sampled). A request aborted while
        its KV was read had its blocks held until now: they are freed."""
        self.settle()
        if req_id in self._state.read_for_nobody:
            self._free_after_peer(self._state.read_for_nobody.pop(req_id).seq_id)
            return
        seq = self._state.loading.pop(req_id)
        total = seq.tokens.shape[0]
        self.alloc.mark_computed(seq.seq_id, total)
        seq.computed = total - 1
        if self._cfg.async_scheduling and self._wake is None:
            # A step is running and the next is planned already: the read's end is in
            # this step's output, which the plan after next is the first to see.
            self._state.loaded_arriving.append(seq)
            return
        self._state.add_loaded([seq])
        self._wake_up()

    def release_held(self, req_id: int) -> None:
        """The decode instance has read ``req_id``'s KV (or gave up on it): the blocks
        held for it are freed."""
        self.settle()
        self._free_after_peer(self._state.held_for_peer.pop(req_id))

    def _free_after_peer(self, seq_id: int) -> None:
        """Free blocks a peer's transfer held, as vLLM frees them when the step running
        reports the transfer's end (under async scheduling, after the next plan)."""
        if self._cfg.async_scheduling and self._wake is None:
            self._state.lagging_held.append(seq_id)
            return
        self.alloc.free(seq_id)
        self._wake_up()

    def _wake_up(self) -> None:
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def never_fits(self, request: Request) -> str:
        """Why ``request`` can never be served by this replica ('' if it can); also asked
        before a prefill instance computes a prompt for this one."""
        prompt, out, n = request.prompt_len, request.output_len, request.n
        if prompt + out > self._cfg.max_model_len:
            limit = self._cfg.max_model_len
            return f"prompt+output {prompt + out} tokens exceed max_model_len {limit}"
        if prompt > self._cfg.max_num_batched_tokens and not self._planner.chunking:
            return (
                f"prompt {prompt} tokens exceed max_num_batched_tokens "
                f"{self._cfg.max_num_batched_tokens} without chunked prefill"
            )
        needed, pool = self._worst_case_blocks(prompt, out, n), self.alloc.num_blocks
        if needed > pool:
            return f"needs {needed} KV blocks, the pool has {pool}"
        return ""

    def _worst_case_blocks(self, prompt: int, output: int, n: int) -> int:
        """Blocks (slots for contiguous) a request holds at its largest, alone."""
        if self._planner.reserve is not None:
            return n * self._planner.reserve(prompt, output)
        # The last sampled token is never written, so KV peaks at prompt + output - 1;
        # forks share the prompt.
        peak = prompt + max(output - 1, 0)
        if self._windowed:
            # A step computes at most the token budget; a step in flight adds its own.
            cfg = self._cfg
            in_flight = cfg.max_num_batched_tokens * (2 if cfg.async_scheduling else 1)
            return self.alloc.peak_blocks(prompt, peak, n, in_flight_tokens=in_flight)
        return self.alloc.blocks_for_samples(prompt, peak, n)

    # -- departures -----------------------------------------------------------------
    def _reject(self, request: Request, reason: str) -> None:
        progress = self._state.in_flight.pop(request.req_id)
        self._on_done(progress.outcome(math.nan, 0, reason))

    def _finished(self, req_id: int, now: float) -> None:
        """The last sample of ``req_id`` is done."""
        progress = self._state.in_flight.pop(req_id)
        request = progress.request
        self._on_done(progress.outcome(now, request.output_len * request.n, ""))

    def unfinished_outcomes(self, reason: str) -> list[RequestOutcome]:
        """Outcomes of the requests still in flight (the run stopped), with what their
        running samples generated so far."""
        self.settle()
        generated = self._state.generated_by_request()
        return [
            progress.outcome(math.nan, generated.get(req_id, 0), reason)
            for req_id, progress in self._state.in_flight.items()
        ]

    # -- the loop ---------------------------------------------------------------------
    def _loop(self):
        """Plan, execute, apply, one step after another, while there is work."""
        while True:
            if not self._work_ready():
                yield from self._sleep()
                continue
            step = yield from self._next_step()
            if step is None:
                continue
            plan, duration, counts = step
            self._completion.apply(plan, self.env.now)
            self._expire()
            if self._state.has_arrivals():
                self._state.promote_arrivals()
            self._fast.last_duration = duration
            self.num_steps += 1
            self._steps.record(self._step_record(counts, duration, plan), self.env.now)

    def _work_ready(self) -> bool:
        """Whether there is work to plan now. With nothing to plan, the step in flight's
        output is in: what finished in it frees (async scheduling's lag ends)."""
        state = self._state
        if not state.has_work() and state.has_arrivals():
            # vLLM's plan made while the last step ran found nothing to schedule: it
            # waited for that step's output (freeing what finished), then planned again
            # with every arrival.
            self._completion.release_lagging()
            state.promote_arrivals(all_of_them=True)
        if state.has_work():
            return True
        self._completion.release_lagging()
        return False

    def _next_step(self):
        """The one source of steps: waits until the next step to apply has run and
        returns its ``(plan, duration, batch counts)``, or None when there is none to
        apply (a decode stretch applied whole, or a plan that scheduled nothing). A
        stretch is taken only with no frees lagging (it plans no step of its own)."""
        lagging = self._state.frees_lag()
        if not lagging and self._fast.begin(self.env.now, self._stretch_horizon) is not None:
            return (yield from self._forward())
        return (yield from self._run_planned())

    def _forward(self):
        """Fast-forward through the decode stretch begun; None once it is applied whole.
        Cut short by ``settle()``, the one step of it running then is returned."""
        try:
            yield from self._wait_until(self._fast.current.end_s)
        except simpy.Interrupt:
            step, self._in_flight = self._in_flight, None
            if step is None:
                return None
            yield from self._wait_until(step.end_s)
            return step.plan, step.duration, batch_counts(step.batch)
        self._count_steps(self._fast.finish())
        self._expire()
        return None

    def _run_planned(self):
        """Plan one step and execute it; None (at once) when it schedules nothing."""
        preemptions = self._state.num_preemptions
        batch, plan = self._planner.plan()
        counts = batch_counts(batch)
        if counts[0] == 0 and not batch.transfers:
            if self._state.frees_lag() or self._state.num_preemptions != preemptions:
                # Plan again, the next record carrying this plan's preemptions: after
                # the frees of the step in flight (vLLM: its output is in), or, when
                # this plan preempted and so admitted nothing (vLLM), admitting now.
                self._planner.carry_preemptions(plan)
                self._completion.release_lagging()
            elif self._state.waits_on_peer() and self._state.is_idle():
                # Blocks here wait on a peer (read in, or held for a reader): so does
                # the queue, until the peer's transfer ends (kv_arrived, release_held).
                yield from self._sleep()
            else:
                unblock(self._state, self._memory, plan, self._reject)
            return None
        self._watch(counts)
        duration = check_duration(self._executor.execute(batch))
        self._completion.release_lagging()
        yield self.env.timeout(duration)
        return plan, duration, counts

    def _stretch_horizon(self) -> float:
        """A stretch ends by the next arrival or the next client deadline."""
        return min(self.horizon(), self._deadlines.next_s())

    def _sleep(self):
        """Wait for something from outside (an arrival, a peer's transfer), or, with
        requests in flight here (KV being read), for the next client deadline: an engine
        that holds requests polls between steps (vLLM's engine core steps empty while a
        request waits for remote KV), so an abort takes effect when it is due."""
        self._wake = self.env.event()
        until = self._deadlines.next_s() if self._state.in_flight else math.inf
        if math.isfinite(until):
            yield self._wake | self.env.timeout(next_delay(self.env.now, until))
        else:
            yield self._wake
        self._wake = None
        self._expire()

    def _expire(self) -> None:
        """Abort the requests whose clients gave up by now (sim/engine/deadlines.py)."""
        for req_id in self._deadlines.due(self.env.now, self._state):
            progress = self._state.in_flight.pop(req_id)
            if self._state.peer is not None:
                self._state.peer.abandon(req_id)
            generated = abort(self._memory, progress.request)
            reason = TIMED_OUT.format(timeout=self._deadlines.timeout_s)
            self._on_done(progress.outcome(math.nan, generated, reason))

    def _wait_until(self, end_s: float):
        """Wait until exactly ``end_s`` (a step's end as stepping one at a time sums it)."""
        while self.env.now < end_s:
            yield self.env.timeout(next_delay(self.env.now, end_s))

    def _watch(self, counts: tuple[int, int, int]) -> None:
        """A watchdog on progress: a replica whose steps compute no token (only move
        blocks) for MAX_IDLE_STEPS steps in a row is stuck, whatever the cause."""
        if counts[1] or counts[2]:
            self._idle_steps = 0
            return
        self._idle_steps += 1
        if self._idle_steps >= MAX_IDLE_STEPS:
            raise StuckRun(
                f"replica {self.index}: {MAX_IDLE_STEPS:,} steps in a row computed no token "
                f"(only swaps and copies) at t={self.env.now:.6g} s: the run is stuck"
            )

    # -- records ----------------------------------------------------------------------
    def _step_record(
        self, counts: tuple[int, int, int], duration: float, plan: StepPlan
    ) -> StepRecord:
        """The record of a step just applied (memory as it stands after it); ``counts``
        are the step's ``batch_counts``."""
        usage = self.alloc.usage(self._next_request_tokens())
        # Stretches never evict, so the count since the last record is this step's.
        evicted = usage.evictions - self._evictions_recorded
        self._evictions_recorded = usage.evictions
        return StepRecord(
            self.env.now - duration,
            self.index,
            duration,
            *counts,
            usage.used_blocks,
            usage.cached_blocks,
            evicted,
            usage.free_blocks,
            usage.token_slots,
            usage.reserved_slots,
            usage.internal_frag_slots,
            usage.external_frag_slots,
            usage.free_slots,
            self._state.swapped_blocks(),
            len(self._state.waiting),
            plan.num_preempted,
            plan.limit,
        )

    def _next_request_tokens(self) -> int:
        """Slots the head of the queue would need (for external fragmentation)."""
        if not self._state.waiting:
            return 0
        seq = self._state.waiting[0].seq
        remaining_out = seq.request.output_len - seq.generated
        blocks = self._planner.blocks_for(seq.tokens.shape[0], remaining_out)
        return self.alloc.tokens_that_fit(0, blocks)  # the slots of those blocks
