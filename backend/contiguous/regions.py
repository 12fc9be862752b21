"""The contiguous allocators' per-sequence records: one region per sequence, in numpy
arrays indexed by sequence id, with running usage sums over the device-resident ones.

Ids are expected to be small and dense (the engine numbers sequences from 0), so a
decode step over the running batch is a handful of vector operations.
"""

from __future__ import annotations

import numpy as np

from backend.base import (
    DuplicateSequence,
    InvalidRequest,
    OutOfBlocks,
    UnknownSequence,
    check_count,
    grow_arrays,
    indexes,
)
from backend.contiguous.slot_space import SlotSpace

NOT_LIVE, ON_DEVICE, ON_CPU = 0, 1, 2  # where a sequence lives, in ``Regions._where``


def will_fill(reserved, target, tokens):
    """Slots of a region that hold or will hold a token: up to the true final length
    (``target``), or what it already holds if it was appended past that."""
    return np.minimum(reserved, np.maximum(target, tokens))


class Regions:
    """Regions of a device address space of ``num_slots`` slots and a CPU one of
    ``num_cpu_slots``, and the token memories behind them. Base of the contiguous
    allocator and its growth and swap mixins, which read and write these fields."""

    def __init__(self, num_slots: int, num_cpu_slots: int):
        self.slots = np.zeros(num_slots, dtype=np.int32)
        self.cpu_slots = np.zeros(num_cpu_slots, dtype=np.int32)
        self._peak_slots = 0  # the most slots reserved at once (peak_used_blocks)
        self._device = SlotSpace(num_slots)
        self._cpu = SlotSpace(num_cpu_slots)
        # per sequence id: where it lives, region start (CPU start while swapped), device
        # reservation, tokens held, true final length (prompt + max_new_tokens)
        self._where = np.zeros(0, dtype=np.int8)
        self._start = np.zeros(0, dtype=np.int64)
        self._reserved = np.zeros(0, dtype=np.int64)
        self._tokens = np.zeros(0, dtype=np.int64)
        self._target = np.zeros(0, dtype=np.int64)
        # running sums over device-resident sequences, so usage() is O(holes)
        self._used_slots = 0
        self._token_slots = 0
        self._fill_slots = 0

    # -- sequence ids ------------------------------------------------------------------
    def _lookup(self, seq_id: int) -> int:
        """The id of a live sequence; UnknownSequence otherwise."""
        if not indexes(seq_id, self._where.shape[0]) or self._where[seq_id] == NOT_LIVE:
            raise UnknownSequence(f"sequence {seq_id!r} is not live")
        return int(seq_id)

    def _on_device(self, seq_id: int) -> int:
        """The id of a live sequence on the device; UnknownSequence, or InvalidRequest
        while it is swapped out."""
        sid = self._lookup(seq_id)
        if self._where[sid] != ON_DEVICE:
            raise InvalidRequest(f"sequence {sid} is swapped out")
        return sid

    def _new_id(self, seq_id: int) -> int:
        """A valid id for a new sequence; InvalidRequest or DuplicateSequence otherwise."""
        sid = check_count("sequence id", seq_id, 0)
        if sid < self._where.shape[0] and self._where[sid] != NOT_LIVE:
            raise DuplicateSequence(f"sequence {sid} is already live")
        return sid

    def _batch_ids(self, seq_ids: np.ndarray) -> np.ndarray:
        """Validate a batch of live, device-resident, distinct sequence ids (hot path:
        a few vector operations when the batch is valid, the diagnosis only when not)."""
        ids = np.asarray(seq_ids)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            raise InvalidRequest(f"seq_ids must be a 1-D integer array, got shape {ids.shape}")
        ids = ids.astype(np.int64, copy=False)
        if ids.size == 0:
            return ids
        ordered = np.sort(ids)
        if (ordered[1:] == ordered[:-1]).any():
            raise InvalidRequest("seq_ids contains duplicates")
        if ordered[0] < 0 or ordered[-1] >= self._where.shape[0]:
            bad = ordered[0] if ordered[0] < 0 else ordered[-1]
            raise UnknownSequence(f"sequence {int(bad)} is not live")
        where = self._where[ids]
        if (where != ON_DEVICE).any():
            first_dead = ids[where == NOT_LIVE]
            if first_dead.size:
                raise UnknownSequence(f"sequence {int(first_dead[0])} is not live")
            raise InvalidRequest(f"sequence {int(ids[where == ON_CPU][0])} is swapped out")
        return ids

    # -- accounting --------------------------------------------------------------------
    def _account(self, ids, sign: int) -> None:
        """Add (+1) or remove (-1) device-resident sequences ``ids`` from the running sums.
        Callers remove before changing a sequence's fields and add back after."""
        reserved, tokens = self._reserved[ids], self._tokens[ids]
        fill = will_fill(reserved, self._target[ids], tokens)
        self._used_slots += sign * int(np.sum(reserved))
        self._token_slots += sign * int(np.sum(tokens))
        self._fill_slots += sign * int(np.sum(fill))
        self._peak_slots = max(self._peak_slots, self._used_slots)

    def _place(self, sid: int, start: int, reserved: int, tokens: np.ndarray, target: int) -> None:
        """Record a new device-resident sequence in a region already taken."""
        grow_arrays(self, ("_where", "_start", "_reserved", "_tokens", "_target"), sid + 1)
        self._where[sid], self._start[sid], self._reserved[sid] = ON_DEVICE, start, reserved
        self._tokens[sid], self._target[sid] = tokens.shape[0], target
        self.slots[start : start + tokens.shape[0]] = tokens
        self._account(sid, +1)

    @staticmethod
    def _out_of_slots(what: str, needed: int, space: SlotSpace) -> OutOfBlocks:
        """The refusal of a command that found no hole of ``needed`` slots in ``space``."""
        available = space.largest_hole()
        return OutOfBlocks(
            f"{what}: no hole of {needed} slots (largest hole {available})",
            needed=needed,
            available=available,
        )
