"""Growth of contiguous regions: ``append`` and the decode step ``append_batch``.

A region grows only when a sequence is appended past its reservation (which the engine
never does for an admitted request): in place when the slots right after it are free,
else it is relocated first-fit and every held slot is copied.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from backend.base import InvalidRequest, as_tokens, check_count
from backend.contiguous.regions import ON_DEVICE, Regions
from backend.contiguous.slot_space import SlotSpace
from backend.transfer import Transfer


class Growth(Regions):
    """Mixin of :class:`ContiguousAllocator`: the growth commands and queries of the
    Allocator interface."""

    @staticmethod
    def _plan_growth(space: SlotSpace, start: int, reserved: int, needed: int) -> int | None:
        """Grow region ``[start, start + reserved)`` to ``needed`` slots in ``space``.

        In place if the hole right after the region is long enough; otherwise relocate
        to the lowest hole of ``needed`` slots, found while the old region is still held
        (so source and destination never overlap), then release the old region. Returns
        the new start, or None with ``space`` untouched when neither is possible."""
        extra = needed - reserved
        if space.hole_at(start + reserved) >= extra:
            space.take(start + reserved, extra)
            return start
        new_start = space.first_fit(needed)
        if new_start is None:
            return None
        space.take(new_start, needed)
        space.release(start, reserved)
        return new_start

    def _resize(self, sid: int, new_start: int, needed: int) -> list[Transfer]:
        """Point ``sid`` at its grown region, copying its tokens if it moved. The caller
        takes ``sid`` out of the usage sums before and puts it back after."""
        old_start, held = int(self._start[sid]), int(self._tokens[sid])
        self._start[sid], self._reserved[sid] = new_start, needed
        if new_start == old_start:
            return []
        self.slots[new_start : new_start + held] = self.slots[old_start : old_start + held]
        return [Transfer(old_start, new_start, count=held)] if held else []

    def can_append(self, seq_id: int, num_tokens: int = 1) -> bool:
        """Whether ``append`` of ``num_tokens`` would succeed now (False while swapped)."""
        sid = self._lookup(seq_id)
        num_tokens = check_count("num_tokens", num_tokens, 1)
        if self._where[sid] != ON_DEVICE:
            return False
        start, reserved = int(self._start[sid]), int(self._reserved[sid])
        needed = int(self._tokens[sid]) + num_tokens
        if needed <= reserved:
            return True
        grows_in_place = self._device.hole_at(start + reserved) >= needed - reserved
        return grows_in_place or self._device.first_fit(needed) is not None

    def append(self, seq_id: int, token_ids: Sequence[int] | np.ndarray) -> list[Transfer]:
        """Write tokens after the sequence's last one.

        Within the reservation nothing moves. Past it, the region grows to exactly the
        new length: in place when the slots right after it are free, else it is
        relocated first-fit and the returned move copies every held slot (one range,
        old -> new). Raises OutOfBlocks (neither possible; nothing changed),
        UnknownSequence, InvalidRequest (swapped out, bad tokens)."""
        sid = self._on_device(seq_id)
        tokens = as_tokens(token_ids)
        held = int(self._tokens[sid])
        needed = held + tokens.shape[0]
        moves: list[Transfer] = []
        new_start = None
        if needed > self._reserved[sid]:
            start, reserved = int(self._start[sid]), int(self._reserved[sid])
            new_start = self._plan_growth(self._device, start, reserved, needed)
            if new_start is None:
                raise self._out_of_slots(f"grow sequence {sid}", needed, self._device)
        self._account(sid, -1)
        if new_start is not None:
            moves = self._resize(sid, new_start, needed)
        start = int(self._start[sid])
        self.slots[start + held : start + needed] = tokens
        self._tokens[sid] = needed
        self._account(sid, +1)
        return moves

    def blocks_needed_for_batch(self, seq_ids: np.ndarray) -> int:
        """Slots beyond the reservations that one more token each would take (usually 0)."""
        ids = self._batch_ids(seq_ids)
        return int(np.count_nonzero(self._tokens[ids] >= self._reserved[ids]))

    def append_batch(self, seq_ids: np.ndarray, token_ids: np.ndarray) -> list[Transfer]:
        """Append one token to each sequence (the decode step), vectorised.

        Sequences whose reservation is full grow by one slot as in :meth:`append`; all
        growths are planned on a copy of the free holes first, so the batch is all or
        nothing. Returns the relocation moves in the order an executor must apply them.
        Raises OutOfBlocks (nothing changed), UnknownSequence, InvalidRequest."""
        ids = self._batch_ids(seq_ids)
        tokens = as_tokens(token_ids, allow_empty=True)
        if tokens.shape != ids.shape:
            raise InvalidRequest(f"{ids.shape[0]} sequences but {tokens.shape[0]} tokens")
        moves = self._grow_full(ids[self._tokens[ids] >= self._reserved[ids]])
        held = self._tokens[ids]
        self.slots[self._start[ids] + held] = tokens
        self._tokens[ids] = held + 1
        # every region now has room for its token, so the reservations are unchanged; a
        # token counts as "will fill" already, and adds one only past the true length
        self._token_slots += ids.shape[0]
        self._fill_slots += int(np.count_nonzero(held >= self._target[ids]))
        return moves

    def _grow_full(self, full: np.ndarray) -> list[Transfer]:
        """Grow each sequence of ``full`` by one slot, all or nothing."""
        if full.shape[0] == 0:
            return []
        space = self._device.copy()
        plan = []
        for sid in full.tolist():
            start, reserved = int(self._start[sid]), int(self._reserved[sid])
            new_start = self._plan_growth(space, start, reserved, reserved + 1)
            if new_start is None:
                raise self._out_of_slots(f"grow sequence {sid}", reserved + 1, space)
            plan.append((sid, new_start, reserved + 1))
        self._device = space
        moves: list[Transfer] = []
        self._account(full, -1)
        for sid, new_start, needed in plan:  # in planning order: later plans may reuse
            moves += self._resize(sid, new_start, needed)  # slots freed by earlier ones
        self._account(full, +1)
        return moves
