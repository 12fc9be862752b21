"""Fast-forward over decode stretches: steps in which nothing happens but decoding.

When a replica has nothing waiting or prefilling (and no swapped request that could come
back), its next steps are decode steps of one fixed batch until a sequence finishes, a
request arrives or memory runs short. Those steps need no decision: their times come
from the cost model at once (``decode_steps``), their blocks from the allocator at once
(``append_steps``, backend/stretch.py), and they take one SimPy event instead of one
each.

Nothing outside the replica may see the difference. The stretch is applied lazily:
before anything reads or changes the replica (an arrival routed to it, a router reading
its view, the end of the run), :meth:`FastForward.cut` brings it to that instant: the
steps that ended are applied and recorded, the step in progress is planned (its slots
held) and then finishes as an ordinary step. The outputs are those of stepping one at a
time, byte for byte (tests/sim/engine/test_fast_forward.py); ``fast_forward=False`` steps one
at a time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from backend.base import KVUsage
from backend.capabilities import TrustedAppendSteps
from backend.step import Batch
from backend.stretch import DecodeStretches
from sim.engine.config import ReplicaPolicies
from sim.engine.executor import (
    CountsStretchSteps,
    Executor,
    PricesDecodeStretches,
    TokenSource,
)
from sim.engine.gaps import TokenGaps
from sim.engine.memory import Memory
from sim.engine.planning.planner import StepPlanner
from sim.engine.policy_guard import check_duration
from sim.engine.records import STEP_FIELDS, Limit, StepRecord
from sim.engine.replica_state import StepPlan
from sim.engine.state import ReplicaState

#: Fewer steps than this are stepped one at a time (a stretch has its own fixed cost).
MIN_STEPS = 4
#: The most steps planned at once (a cut stretch wastes only their step times).
MAX_STEPS = 4096

_COLUMN = {name: i for i, name in enumerate(STEP_FIELDS)}
#: The step record's memory columns: the KVUsage fields it carries.
_USAGE_COLUMNS = tuple(name for name in STEP_FIELDS if name in KVUsage._fields)


class StepSink(Protocol):
    """Where a replica's step records go (sim.output.StepLog)."""

    def record(self, step: StepRecord, end_s: float | None = None) -> None: ...

    def record_rows(self, rows: np.ndarray, ends: np.ndarray) -> None: ...


@dataclass(frozen=True)
class StretchParts:
    """The parts of a replica a stretch works on."""

    index: int
    state: ReplicaState
    planner: StepPlanner
    memory: Memory
    gaps: TokenGaps
    executor: Executor
    outputs: TokenSource
    policies: ReplicaPolicies
    steps: StepSink


@dataclass(frozen=True, eq=False)
class Stretch:
    """Decode steps of a fixed batch, not yet planned: the allocator is asked for their
    slots only when the stretch ends or is cut (once), as far as it got."""

    durations: np.ndarray
    ends: np.ndarray  # each step's end, summed as SimPy sums its timeouts
    seq_ids: np.ndarray
    streams: np.ndarray
    first_position: np.ndarray  # output position of the token each fed at the first step

    @property
    def end_s(self) -> float:
        return float(self.ends[-1])


@dataclass(frozen=True)
class InFlight:
    """The step a cut left in progress: it finishes as an ordinary step."""

    batch: Batch
    plan: StepPlan
    duration: float
    end_s: float


class FastForward:
    """The decode stretches of one replica. Mutates the replica's state, allocator,
    token gaps and step log (as its steps would); the replica counts the steps."""

    def __init__(self, parts: StretchParts, enabled: bool):
        self.parts = parts
        self.state, self.alloc = parts.state, parts.state.alloc
        policies = parts.policies
        self.enabled = (
            enabled
            and isinstance(self.alloc, DecodeStretches)
            and isinstance(parts.executor, PricesDecodeStretches)
            # a mode that promises a decode step when nothing else is queued
            and policies.batching.decode_stretches is True
            # tokens counted per tenant as steps end are read by other replicas' policies
            and policies.served_tokens is None
        )
        # The engine's own batch: the allocator's unchecked entry where it has one.
        self._append_steps = (
            self.alloc.append_steps_trusted
            if isinstance(self.alloc, TrustedAppendSteps)
            else self.alloc.append_steps
            if isinstance(self.alloc, DecodeStretches)
            else None
        )
        # an executor keeping statistics of the steps it prices learns which ran
        counts = isinstance(parts.executor, CountsStretchSteps)
        self._ran = parts.executor.stretch_ran if counts else lambda steps: None
        self.current: Stretch | None = None
        self.steps_forwarded = 0  # steps applied as part of a stretch
        self.last_duration = 0.0  # of the latest step (the replica's scale of a step)

    def begin(self, now: float, horizon: Callable[[], float]) -> Stretch | None:
        """A stretch from ``now`` if the replica is in one (None: step normally).
        ``horizon()`` is when the stretch is likely to be cut (an arrival): a stretch
        planned past it wastes work, one cut after fewer than MIN_STEPS costs more than
        it saves. Either way the results are the same."""
        state, d = self.state, self.state.decodes
        if (
            not self.enabled
            or state.waiting
            or state.loaded
            or state.prefilling
            or not len(d)
            or state.has_arrivals()
        ):
            return None
        if state.swapped and not self.parts.memory.swap_in_stays_blocked():
            return None  # a swapped request may come back: a decision, not a stretch
        if self.parts.planner.unlogged_preemptions:
            return None  # a preemption since the last step goes in the next step's record
        until = horizon()
        if until - now < MIN_STEPS * self.last_duration:
            return None  # an arrival is due before the stretch could pay for itself
        limit = min(int((d.target - d.generated).min()) - 1, MAX_STEPS)  # none finishes
        if limit < MIN_STEPS:
            return None
        steps = self.alloc.plain_decode_steps(d.seq_id, limit)
        if steps < MIN_STEPS:
            return None
        durations = np.asarray(self.parts.executor.decode_steps(d.context + 1, steps), dtype=float)
        if not np.isfinite(durations).all() or (durations < 0).any():
            bad = durations[~(np.isfinite(durations) & (durations >= 0))][0]
            check_duration(float(bad))  # raises the cost model's failure
        ends = np.add.accumulate(np.concatenate(([now], durations)))[1:]
        likely = int(np.searchsorted(ends, until)) + 1  # steps until the arrival, with it
        if likely < MIN_STEPS:
            self._ran(0)
            return None
        if likely < steps:  # (the rest would most likely be planned for nothing)
            steps, durations, ends = likely, durations[:likely], ends[:likely]
        self.last_duration = float(durations[-1])
        self.current = Stretch(durations, ends, d.seq_id.copy(), d.stream.copy(), d.generated - 1)
        return self.current

    def finish(self) -> int:
        """The stretch ran to its end: plan and apply all of it; returns its steps."""
        stretch, self.current = self.current, None
        steps = stretch.durations.shape[0]
        self._apply(stretch, steps, self._plan(stretch, steps))
        self._ran(steps)
        return steps

    def cut(self, now: float) -> tuple[int, InFlight | None]:
        """Bring the current stretch to ``now``: the steps that ended before it are
        applied, the one in progress is planned. Returns (steps applied, the step in
        progress or None). Call only with a current stretch."""
        stretch, self.current = self.current, None
        done = int(np.searchsorted(stretch.ends, now, side="left"))  # ended before now
        steps = stretch.durations.shape[0]
        self._apply(stretch, done, self._plan(stretch, min(done + 1, steps)))
        self._ran(min(done + 1, steps))  # (the step in progress runs as priced)
        if done == steps:
            return done, None
        d = self.state.decodes
        batch = Batch((), d.seq_id.copy(), d.context.copy(), np.zeros(len(d), np.int32))
        plan = StepPlan(decode_rows=len(d), limit=self._limit())
        step = InFlight(batch, plan, float(stretch.durations[done]), stretch.ends[done])
        return done, step

    def _limit(self) -> Limit:
        """A stretch step's ``limit``: nothing waits, but a swapped request binds memory
        (as in StepPlanner.plan)."""
        return Limit.KV_BLOCKS if self.state.swapped else Limit.NONE

    # -- the work, done once per stretch ----------------------------------------------
    def _plan(self, stretch: Stretch, steps: int) -> dict[str, np.ndarray]:
        """Hold the slots of the first ``steps`` steps; returns the memory after each."""
        offsets = np.arange(steps)[:, None]
        tokens = self.parts.outputs.tokens(
            stretch.streams[None, :], stretch.first_position + offsets
        )
        planner = self.parts.planner  # (its first step begins where a plan would have)
        planner.step_begins()
        usage = self._append_steps(stretch.seq_ids, tokens)
        self.state.decodes.context += steps
        return usage

    def _apply(self, stretch: Stretch, steps: int, usage: dict[str, np.ndarray]) -> None:
        """Apply and record the first ``steps`` steps (all planned; ``usage`` after each)."""
        if steps <= 0:
            return
        d = self.state.decodes
        ends = stretch.ends[:steps]
        self.steps_forwarded += steps
        d.generated += steps
        d.token_step[:] = self.parts.gaps.decode_stretch(ends, d.token_step.copy())
        self.parts.steps.record_rows(self._rows(stretch, steps, usage), ends)

    def _rows(self, stretch: Stretch, steps: int, usage: dict[str, np.ndarray]) -> np.ndarray:
        """steps.csv rows of the first ``steps`` steps (see Replica._step_record)."""
        rows = np.zeros((steps, len(STEP_FIELDS)))
        durations = stretch.durations[:steps]
        rows[:, _COLUMN["time_s"]] = stretch.ends[:steps] - durations
        rows[:, _COLUMN["replica"]] = self.parts.index
        rows[:, _COLUMN["duration_s"]] = durations
        batch = stretch.seq_ids.shape[0]
        rows[:, _COLUMN["batch_size"]] = batch
        rows[:, _COLUMN["num_decode_tokens"]] = batch
        for name in _USAGE_COLUMNS:
            rows[:, _COLUMN[name]] = usage[name][:steps]
        rows[:, _COLUMN["limit"]] = self._limit()
        rows[:, _COLUMN["swapped_blocks"]] = self.state.swapped_blocks()
        return rows


def next_delay(now: float, target: float) -> float:
    """A timeout delay from ``now`` towards ``target`` (>= now): SimPy's ``now + delay``
    lands exactly on ``target`` if any delay does, else exactly on a float just below it.

    The stretch's step ends are exact running sums, as SimPy makes them one step at a
    time; ``target - now`` can round off, and when ``now`` sits half a unit in the last
    place between two floats of ``target``'s grid, round-half-even makes every other
    float of that grid unreachable in one hop (so the caller waits again from there)."""
    below = target
    for _ in range(4):
        delay = _exact_delay(now, below)
        if delay is not None:
            return delay
        below = math.nextafter(below, -math.inf)
    raise AssertionError(f"no delay from {now!r} reaches {target!r}")


def _exact_delay(now: float, target: float) -> float | None:
    if target <= now:
        return 0.0 if target == now else None
    delay = target - now
    for _ in range(4):
        reached = now + delay
        if reached == target:
            return delay
        delay = math.nextafter(delay, math.inf if reached < target else -math.inf)
    return None
