"""Inter-token latency (ITL) of one replica, kept exactly and compactly.

Every output token after a sample's first has an ITL: the time since that sample's
previous token. Each decoding sequence remembers the replica step that gave its newest
token; a step that decodes it again adds one gap. Sequences decoded in consecutive steps
(nearly all of them) share one gap, the time between the two steps' ends, so a step
adds one ``(gap, count)`` entry for them and one per exception (a sample back from swap
or a skipped step, a re-prefill after recompute). Memory: O(steps), not O(tokens), and
8 bytes an entry: typed ``array`` buffers, not lists of Python floats (a million-request
run has millions of steps).
"""

from __future__ import annotations

from array import array

import numpy as np


class TokenGaps:
    """Step end times and the (gap seconds, tokens) entries of one replica."""

    def __init__(self) -> None:
        self._ends = array("d")  # end time of each step, by step index
        self._gaps = array("d")
        self._counts = array("q")

    def step_ended(self, now: float) -> int:
        """Record a step ending at ``now``; returns its index."""
        self._ends.append(now)
        return len(self._ends) - 1

    def tokens(self, previous_steps: np.ndarray, step: int) -> None:
        """One token for each sequence whose newest token came from ``previous_steps``."""
        ends = self._ends
        following = previous_steps == step - 1
        consecutive = int(np.count_nonzero(following))
        if consecutive:
            self._gaps.append(ends[step] - ends[step - 1])
            self._counts.append(consecutive)
        if consecutive < previous_steps.shape[0]:
            for previous in previous_steps[~following].tolist():
                self.token_after(previous, step)

    def decode_stretch(self, ends: np.ndarray, previous_steps: np.ndarray) -> int:
        """Steps ending at ``ends`` in each of which the same sequences got one token
        (before the first, their newest tokens came from ``previous_steps``): exactly
        what :meth:`step_ended` and :meth:`tokens` step by step record. Returns the
        index of the last of them."""
        first = len(self._ends)
        self._ends.frombytes(np.ascontiguousarray(ends, dtype=np.float64).tobytes())
        self.tokens(previous_steps, first)
        if ends.shape[0] > 1:  # after the first, every token follows its predecessor's
            self._gaps.frombytes(np.diff(ends).astype(np.float64).tobytes())
            self._counts.frombytes(
                np.full(ends.shape[0] - 1, previous_steps.shape[0], np.int64).tobytes()
            )
        return first + ends.shape[0] - 1

    def token_after(self, previous_step: int, step: int) -> None:
        self._gaps.append(self._ends[step] - self._ends[previous_step])
        self._counts.append(1)

    def entries(self) -> tuple[np.ndarray, np.ndarray]:
        """(gap seconds, tokens with that gap), in the order they were recorded."""
        gaps = np.frombuffer(self._gaps, dtype=np.float64).copy()
        return gaps, np.frombuffer(self._counts, dtype=np.int64).copy()
