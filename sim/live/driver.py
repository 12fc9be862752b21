"""The simulator's engine in wall-clock time: the replicas, scheduler, allocator and
policies of a scenario, each step run for real, requests arriving from outside.

Why a thread and a plain ``simpy.Environment``, not ``simpy.rt.RealtimeEnvironment`` or
an asyncio task: a real step (a torch forward pass) blocks for milliseconds. On the
asyncio loop it would stall every HTTP stream for that long; in its own thread torch
releases the GIL and the server keeps streaming. ``RealtimeEnvironment.step`` sleeps
until the next event's wall time and cannot be woken by a request arriving meanwhile,
and SimPy is not thread-safe, so arrivals from the HTTP thread cannot be scheduled into
it directly. Instead the engine thread owns the environment: it takes arrivals from a
queue, schedules each at its wall arrival time, processes every event that is due, and
sleeps until the next arrival otherwise.

The SimPy clock *is* the wall clock (seconds since :class:`EngineDriver` was made):
:class:`WallClockExecutor` runs a step and returns the wall time since the step's
simulated start, so each step's end lands on the wall time it really ended, planning
and bookkeeping included. Nothing drifts, and the engine's records (TTFT, step times)
are wall-clock measurements.

What each step generated goes out through ``publish(events)`` (called in the engine
thread; the server hands the list to its loop): ``("tokens", req_id, sample, first,
count)`` says sample ``sample`` made output tokens ``first .. first + count - 1``;
``("done", outcome)`` ends a request (finished, or rejected with its reason);
``("failed", message)`` says the engine stopped. Tokens are the engine's synthetic
stream (sim.workload.tokens), the same ids it feeds back as decode inputs: the forward
pass runs for real and sets the timing, the random-weight model's own argmax is not
used. A sample whose last token(s) it generated while not running (a preempted sample
finishing on its re-prefill) gets them with its request's ``done``.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections import deque
from collections.abc import Callable

import simpy

from sim.engine.records import RequestOutcome, StepRecord
from sim.run.build import build_cluster, build_replica
from sim.workload.request import Request
from sim.workload.tokens import SyntheticOutputs, output_token_ids, stream_id

Publish = Callable[[list[tuple]], None]


class WallClockExecutor:
    """Runs each step on ``inner`` and returns the wall seconds since the step's
    simulated start (so the SimPy clock meets the wall clock at its end)."""

    def __init__(self, inner, env: simpy.Environment, clock: Callable[[], float]):
        self.inner = inner
        self.env = env
        self.clock = clock

    def execute(self, batch) -> float:
        self.inner.execute(batch)
        return max(self.clock() - self.env.now, 1e-9)


class _Steps:
    """The replicas' step sink (sim.engine.fast_forward.StepSink): each record to ``on_step``."""

    def __init__(self, on_step: Callable[[StepRecord], None]):
        self.on_step = on_step

    def record(self, step: StepRecord, end_s: float | None = None) -> None:
        self.on_step(step)

    def record_rows(self, rows, ends) -> None:
        raise AssertionError("a live engine steps one at a time (fast_forward=False)")


class EngineDriver:
    """A scenario's replicas served in wall-clock time from a thread of their own.

    ``make_executor(scenario, allocator)`` builds each replica's real executor;
    ``publish`` receives each step's events (module docstring); ``metrics`` (optional,
    sim.live.metrics.ServingMetrics) is updated as steps and requests end. Build errors
    (a scenario the engine cannot serve) raise ScenarioError from the constructor."""

    def __init__(self, scenario, make_executor, publish: Publish, metrics=None):
        self.scenario = scenario
        self._publish = publish
        self._metrics = metrics
        self._lock = metrics.lock if metrics is not None else threading.Lock()
        self._origin = time.perf_counter()
        self._inbox: deque[Request] = deque()
        self._wake = threading.Event()
        self._stopping = False
        self._ids = itertools.count()
        self._pending: list[tuple] = []
        self._emitted: dict[tuple[int, int], int] = {}  # (req_id, sample) -> tokens sent
        self._last_token: dict[tuple[int, int], float] = {}
        self._arrivals: dict[int, float] = {}
        self.failure: BaseException | None = None
        self.env = simpy.Environment()
        self._seed, self._vocab = scenario.simulation.seed, scenario.model.vocab_size
        outputs = SyntheticOutputs(self._seed, self._vocab)
        replicas = [
            # One event per step, never a fast-forwarded decode stretch: each step runs
            # for real and its tokens go out as soon as it ends.
            build_replica(
                scenario,
                self.env,
                index,
                make_executor=lambda alloc: WallClockExecutor(
                    make_executor(scenario, alloc), self.env, self.now
                ),
                outputs=outputs,
                steps=_Steps(self._on_step),
                on_done=self._on_done,
                fast_forward=False,
            )
            for index in range(scenario.routing.replicas)
        ]
        self.cluster = build_cluster(scenario, self.env, replicas)
        self._thread = threading.Thread(target=self._run, name="pagesim-engine", daemon=True)

    # -- called from any thread ----------------------------------------------------------
    def now(self) -> float:
        """Wall seconds since the driver was made (the engine's clock)."""
        return time.perf_counter() - self._origin

    def next_req_id(self) -> int:
        return next(self._ids)  # itertools.count is atomic under the GIL

    def start(self) -> None:
        self._thread.start()

    def submit(self, request: Request) -> None:
        """Hand ``request`` (its ``arrival_s`` on :meth:`now`'s clock) to the engine."""
        self._inbox.append(request)
        self._wake.set()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    # -- the engine thread ---------------------------------------------------------------
    def _run(self) -> None:
        env = self.env
        try:
            while not self._stopping:
                self._wake.clear()  # before reading the inbox: a later submit wakes us
                while self._inbox:
                    env.process(self._arrive(self._inbox.popleft()))
                if env.peek() <= self.now():
                    with self._lock:  # /metrics never reads the counts mid-change
                        env.step()
                    self._flush()
                    continue
                delay = env.peek() - self.now()
                self._wake.wait(None if math.isinf(delay) else delay)
        except BaseException as err:  # noqa: BLE001 - reported to every waiting request
            self.failure = err
            self._publish([("failed", f"{type(err).__name__}: {err}")])

    def _arrive(self, request: Request):
        if request.arrival_s > self.env.now:
            yield self.env.timeout(request.arrival_s - self.env.now)
        self._arrivals[request.req_id] = request.arrival_s
        replica = self.cluster.replicas[self.cluster.route(request)]
        replica.submit(request)
        if self._metrics is not None:
            self._metrics.arrived(replica.index, replica.view)

    def _flush(self) -> None:
        if self._pending:
            events, self._pending = self._pending, []
            self._publish(events)

    def _tokens(self, req_id: int, sample: int, upto: int, now: float, replica: int) -> None:
        key = (req_id, sample)
        had = self._emitted.get(key, 0)
        if upto <= had:
            return
        self._emitted[key] = upto
        self._pending.append(("tokens", req_id, sample, had, upto - had))
        if self._metrics is None:
            return
        self._metrics.generated(upto - had, replica)
        previous = self._last_token.get(key)
        if previous is None and sample == 0:
            self._metrics.first_token(now - self._arrivals.get(req_id, now), replica)
        if previous is not None:
            self._metrics.token_gap(now - previous, upto - had, replica)
        self._last_token[key] = now

    def _on_step(self, record: StepRecord) -> None:
        now = self.env.now
        view = self.cluster.replicas[record.replica].view
        for req_id, sample, generated in view.running_samples():
            self._tokens(req_id, sample, generated, now, record.replica)
        if self._metrics is not None:
            self._metrics.step(record, view)

    def _on_done(self, outcome: RequestOutcome) -> None:
        req_id, now = outcome.req_id, self.env.now
        if outcome.finished:
            for sample in range(outcome.n):
                self._tokens(req_id, sample, outcome.output_len, now, outcome.replica)
        for sample in range(outcome.n):
            self._emitted.pop((req_id, sample), None)
            self._last_token.pop((req_id, sample), None)
        self._arrivals.pop(req_id, None)
        self._pending.append(("done", outcome))
        if self._metrics is not None:
            self._metrics.finished(outcome, self.cluster.replicas[outcome.replica].view)


def token_ids(seed: int, vocab_size: int, req_id: int, sample: int, first: int, count: int):
    """The ids of output tokens ``first .. first + count - 1`` of a sample (the engine's
    synthetic stream)."""
    import numpy as np

    positions = np.arange(first, first + count)
    return output_token_ids(seed, np.int64(stream_id(req_id, sample)), positions, vocab_size)
