"""The paged manager's per-sequence state, shared by its KV cache groups: which
sequences are live, where (device or CPU) and how many tokens each holds; and the checks
of the ids callers pass in. Block tables are each group's (group_tables.py).

Scalars live in numpy arrays indexed by sequence id (ids are small and dense: the
engine numbers sequences from 0), so the decode step reads and writes a whole batch's
with one fancy index.
"""

from __future__ import annotations

import numpy as np

from backend.base import (
    DuplicateSequence,
    InvalidRequest,
    UnknownSequence,
    as_tokens,
    check_count,
    grow_arrays,
    indexes,
)

DEAD, ON_DEVICE, SWAPPED = 0, 1, 2  # sequence states in ``SequenceRegistry.state``


class SequenceRegistry:
    """Live sequences. ``state`` and ``num_tokens`` (arrays indexed by sequence id) are
    read and written by the block manager; ``state`` changes only through ``set_state``
    so that a checked batch is checked again after any change."""

    def __init__(self) -> None:
        capacity = 64
        self.state = np.zeros(capacity, np.int8)
        self.num_tokens = np.zeros(capacity, np.int64)
        self._batch_mark = np.zeros(capacity, np.int64)  # scratch for duplicate detection
        self._arange = np.arange(capacity)
        # The decode batch is usually the same sequences step after step: remember the
        # last batch whose ids passed the checks, valid until any sequence changes state
        # (``_epoch`` counts those changes).
        self._epoch = 0
        self._checked_ids: tuple[bytes, int] | None = None

    # -- single ids ------------------------------------------------------------------------
    def state_of(self, seq_id: int) -> int:
        """The state of any value given as a sequence id (DEAD unless it is live)."""
        if type(seq_id) is int:  # the engine's ids: a plain int is checked by its range
            return int(self.state[seq_id]) if 0 <= seq_id < self.state.shape[0] else DEAD
        return int(self.state[seq_id]) if indexes(seq_id, self.state.shape[0]) else DEAD

    def live(self, seq_id: int) -> int:
        """``seq_id`` as an int; UnknownSequence unless it is live."""
        if self.state_of(seq_id) == DEAD:
            raise UnknownSequence(f"sequence {seq_id} is not live (never allocated or freed)")
        return int(seq_id)

    def on_device(self, seq_id: int) -> int:
        """``seq_id`` as an int; UnknownSequence unless live, InvalidRequest if swapped."""
        state = self.state_of(seq_id)
        if state == ON_DEVICE:
            return int(seq_id)
        if state == SWAPPED:
            raise InvalidRequest(f"sequence {seq_id} is swapped out; swap it in first")
        return self.live(seq_id)  # raises UnknownSequence

    def new_id(self, seq_id: int) -> int:
        """A valid id for a new sequence; InvalidRequest or DuplicateSequence otherwise.
        No mutation: the arrays grow in ``add``, once the command can no longer fail."""
        seq = check_count("sequence id", seq_id, 0)
        if self.state_of(seq) != DEAD:
            raise DuplicateSequence(f"sequence {seq} is already live")
        return seq

    # -- changes ---------------------------------------------------------------------------
    def set_state(self, seq: int, state: int) -> None:
        self.state[seq] = state
        self._epoch += 1  # batches checked before this change must be checked again

    def add(self, seq: int, num_tokens: int) -> None:
        """Register new sequence ``seq`` on the device, holding ``num_tokens`` tokens."""
        if seq >= self.state.shape[0]:  # (ids are dense: the arrays rarely grow)
            grow_arrays(self, ("state", "num_tokens", "_batch_mark"), seq + 1)
        self.set_state(seq, ON_DEVICE)
        self.num_tokens[seq] = num_tokens

    def remove(self, seq: int) -> None:
        """Forget live sequence ``seq``."""
        self.set_state(seq, DEAD)
        self.num_tokens[seq] = 0

    # -- batches ---------------------------------------------------------------------------
    def check_batch(self, seq_ids, token_ids) -> tuple[np.ndarray, np.ndarray]:
        """A decode batch as (int64 ids, int32 tokens). Raises InvalidRequest (shapes,
        dtypes, duplicate ids, a swapped-out id) or UnknownSequence. No mutation but the
        checked-batch cache and the duplicate-detection scratch."""
        seqs = np.asarray(seq_ids)
        if seqs.ndim != 1 or np.shape(token_ids) != seqs.shape:
            raise InvalidRequest(
                f"seq_ids and token_ids must be 1-D of equal length, got {seqs.shape} "
                f"and {np.shape(token_ids)}"
            )
        tokens = as_tokens(token_ids, allow_empty=True)  # integer, in range
        if not seqs.size:
            return seqs.astype(np.int64), tokens
        if seqs.dtype.kind not in "iu":
            raise InvalidRequest(f"seq_ids must be integers, got dtype {seqs.dtype}")
        seqs = seqs.astype(np.int64, copy=False)
        ids = seqs.tobytes()
        if self._checked_ids != (ids, self._epoch):
            self._check_ids(seqs)
            self._checked_ids = (ids, self._epoch)
        return seqs, tokens

    def _check_ids(self, seqs: np.ndarray) -> None:
        """Raise unless every id of the (int64) batch is a distinct on-device sequence."""
        if seqs.min() < 0 or seqs.max() >= self.state.shape[0]:
            self.on_device(int(seqs[(seqs < 0) | (seqs >= self.state.shape[0])][0]))
        on_device = self.state[seqs] == ON_DEVICE
        if not on_device.all():
            self.on_device(int(seqs[np.argmin(on_device)]))  # raises the precise error
        # Duplicate ids: scatter positions, the later duplicate overwrites the earlier.
        positions = self._positions(seqs.shape[0])
        self._batch_mark[seqs] = positions
        if (self._batch_mark[seqs] != positions).any():
            raise InvalidRequest("append_batch: duplicate sequence ids in one batch")

    def _positions(self, count: int) -> np.ndarray:
        """``arange(count)``, cached: the decode batch has the same size step after step."""
        if self._arange.shape[0] < count:
            self._arange = np.arange(max(count, 2 * self._arange.shape[0]))
        return self._arange[:count]

    # -- state -----------------------------------------------------------------------------
    def snapshot_state(self) -> tuple:
        """Every piece of mutable state but the caches and scratch, for snapshots."""
        return self.state, self.num_tokens

    def check_invariants(self, tables: dict[int, list[int]]) -> tuple[list[int], list[int]]:
        """Assert the live sequences are those that hold ``tables``; returns them split
        into (on the device, swapped out), each in ascending id order."""
        live = sorted(tables)
        assert np.flatnonzero(self.state).tolist() == live, "state vs tables"
        on_device = [s for s in live if self.state[s] == ON_DEVICE]
        swapped = [s for s in live if self.state[s] == SWAPPED]
        return on_device, swapped
