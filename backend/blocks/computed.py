"""How far each sequence's KV is computed and how far processed, for the sliding windows
of a model's KV cache groups (kv_groups.py): a window releases only blocks behind tokens
whose KV exists, and, while a step is in flight, behind those its earlier steps wrote.

A step computes all a sequence holds once it is scheduled, so growth and a scheduled
prompt chunk raise the computed count at once. Under async scheduling the engine plans a
step while the previous one still runs; vLLM then frees a window's blocks behind the
computed count less the request's in-flight tokens (``Scheduler.allocate_slots``: the
processed-token basis), so the count a sequence had before the previous step's growth is
kept beside it. The engine says when each step begins and whether one is in flight.
"""

from __future__ import annotations

import numpy as np

from backend.base import grow_arrays


class ComputedTokens:
    """Per sequence id: tokens computed, the step it last grew in, and what it had
    computed before that step. Mutated only through its methods."""

    def __init__(self) -> None:
        self.computed = np.zeros(64, np.int64)
        self.grown_in = np.full(64, -1, np.int64)
        self.before_step = np.zeros(64, np.int64)
        self.step, self.lag = 0, False

    def begin_step(self, lag: bool) -> None:
        """The engine plans a new step; ``lag``: the previous one is still in flight."""
        self.step += 1
        self.lag = lag

    def next_step(self) -> None:
        """The next step of a decode stretch begins, as the one before it did."""
        self.begin_step(self.lag)

    def add(self, seq: int, computed: int, before: int) -> None:
        """New sequence ``seq`` has ``computed`` tokens, ``before`` of them from before
        this step (a prefix hit)."""
        grow_arrays(self, ("computed", "grown_in", "before_step"), seq + 1)
        self.computed[seq] = computed
        self.grown_in[seq], self.before_step[seq] = self.step, before

    def fork(self, parent: int, child: int) -> None:
        grow_arrays(self, ("computed", "grown_in", "before_step"), child + 1)
        for name in ("computed", "grown_in", "before_step"):
            array = getattr(self, name)
            array[child] = array[parent]

    def grow(self, seqs: np.ndarray, counts: np.ndarray | int) -> None:
        """``seqs`` have computed ``counts`` tokens now, in this step (never fewer than
        before)."""
        first = self.grown_in[seqs] != self.step
        self.before_step[seqs[first]] = self.computed[seqs[first]]
        self.grown_in[seqs] = self.step
        self.computed[seqs] = np.maximum(self.computed[seqs], counts)

    def processed(self, seqs: np.ndarray) -> np.ndarray:
        """Tokens of ``seqs`` a window may release behind: every computed one, or, while
        the previous step is in flight, those computed before it. No mutation."""
        if not self.lag:
            return self.computed[seqs]
        in_flight = self.grown_in[seqs] == self.step - 1
        return np.where(in_flight, self.before_step[seqs], self.computed[seqs])

    def processed_in_stretch(self, seqs: np.ndarray, held: np.ndarray, steps: int) -> np.ndarray:
        """``processed(seqs)`` at each row of a decode stretch of ``steps`` rows, ``seqs``
        holding ``held`` tokens before it (one row per step): what it says now, then every
        token held before the row (before the row before it, while a step is in flight).
        No mutation."""
        grid = held[None, :] + np.arange(steps)[:, None] - int(self.lag)
        grid[0] = self.processed(seqs)
        return grid

    def grow_stretch(self, seqs: np.ndarray, held: np.ndarray, steps: int) -> None:
        """``seqs`` (holding ``held``) grew by one token in each of ``steps`` rows, a step
        beginning between two rows: as ``grow`` per row with ``next_step`` between."""
        self.grow(seqs, held + 1)
        if steps > 1:
            self.step += steps - 1
            self.grown_in[seqs] = self.step
            self.before_step[seqs] = held + steps - 1
            self.computed[seqs] = np.maximum(self.computed[seqs], held + steps)

    def snapshot_state(self) -> tuple:
        return (self.computed, self.grown_in, self.before_step, self.step, self.lag)
