"""The free list of a block pool: a FIFO queue of block ids over a numpy ring.

First in, first out: a block freed long ago is reused first, so block ids are
deterministic and easy to pin in tests. The ring holds every block at most once, so
its capacity is the pool size and it never grows. Taking or returning many blocks is
one slice copy: a decode step in which a thousand sequences cross a block boundary
takes a thousand blocks without a Python loop.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np


class FreeList:
    """Block ids ``0 .. capacity - 1``, all free at the start, in ascending order."""

    def __init__(self, capacity: int):
        self._ring = np.arange(capacity, dtype=np.int64)
        self._capacity = capacity
        self._head = 0  # index of the block handed out next
        self._len = capacity

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[int]:
        """The free blocks, next to be taken first (for snapshots and invariants)."""
        return iter(self._window(self._head, self._len).tolist())

    def take(self, count: int) -> np.ndarray:
        """Remove and return the ``count`` oldest free blocks (a new array).
        The caller checked ``count <= len(self)``."""
        head = self._head
        end = head + count
        self._len -= count
        if end < self._capacity:  # the decode step's case: one slice, no wrap
            self._head = end
            return self._ring[head:end].copy()
        self._head = end - self._capacity if self._capacity else 0
        return self._window(head, count)

    def take_one(self) -> int:
        """Remove and return the oldest free block (the caller checked there is one)."""
        block = int(self._ring[self._head])
        self._head = (self._head + 1) % self._capacity
        self._len -= 1
        return block

    def put(self, blocks: Sequence[int] | np.ndarray) -> None:
        """Append ``blocks`` (none of them free already) at the back, in order."""
        count = len(blocks)
        if not count:
            return
        capacity = self._capacity
        tail = (self._head + self._len) % capacity
        end = tail + count
        if end <= capacity:
            self._ring[tail:end] = blocks
        else:  # wraps around the end of the ring
            split = capacity - tail
            values = np.asarray(blocks, dtype=np.int64)
            self._ring[tail:] = values[:split]
            self._ring[: end - capacity] = values[split:]
        self._len += count

    def _window(self, start: int, count: int) -> np.ndarray:
        """A copy of ``count`` ring entries from ``start``, wrapping around."""
        capacity = self._capacity
        end = start + count
        if end <= capacity:
            return self._ring[start:end].copy()
        return np.concatenate((self._ring[start:], self._ring[: end - capacity]))
