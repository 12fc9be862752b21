"""Swap of contiguous regions between the device and the CPU address spaces.

Only the held tokens travel (not the empty reservation), to the lowest CPU hole that
fits them; swap-in re-reserves the full region at the lowest device hole that fits.
"""

from __future__ import annotations

from backend.base import InvalidRequest
from backend.contiguous.regions import ON_CPU, ON_DEVICE, Regions
from backend.contiguous.slot_space import SlotSpace
from backend.transfer import CPU, GPU, Transfer


class Swap(Regions):
    """Mixin of :class:`ContiguousAllocator`: the swap commands and queries of the
    Allocator interface."""

    @property
    def num_free_cpu_blocks(self) -> int:
        return self._cpu.free_total

    def can_swap_out(self, *seq_ids: int) -> bool:
        sids = [self._lookup(seq_id) for seq_id in seq_ids]
        if any(self._where[sid] != ON_DEVICE for sid in sids):
            return False
        return self._places_in_turn(self._cpu, [int(self._tokens[sid]) for sid in sids])

    def swap_out(self, seq_id: int) -> list[Transfer]:
        """Copy the held tokens to the lowest CPU hole that fits them (only tokens travel,
        not the empty reservation) and release the device region; the reservation size
        is remembered for swap-in. Returns the move of the held slots (one range).
        Raises OutOfBlocks (nothing changed), UnknownSequence, InvalidRequest."""
        sid = self._lookup(seq_id)
        if self._where[sid] != ON_DEVICE:
            raise InvalidRequest(f"sequence {sid} is already swapped out")
        held, src = int(self._tokens[sid]), int(self._start[sid])
        dst = self._cpu.first_fit(held)
        if dst is None:
            raise self._out_of_slots(f"swap out sequence {sid}", held, self._cpu)
        self._cpu.take(dst, held)
        self.cpu_slots[dst : dst + held] = self.slots[src : src + held]
        self._account(sid, -1)
        self._device.release(src, int(self._reserved[sid]))
        self._where[sid], self._start[sid] = ON_CPU, dst
        return [Transfer(src, dst, GPU, CPU, count=held)] if held else []

    def can_swap_in(self, *seq_ids: int) -> bool:
        sids = [self._lookup(seq_id) for seq_id in seq_ids]
        if any(self._where[sid] != ON_CPU for sid in sids):
            return False
        return self._places_in_turn(self._device, [int(self._reserved[sid]) for sid in sids])

    @staticmethod
    def _places_in_turn(space: SlotSpace, sizes: list[int]) -> bool:
        """Whether regions of ``sizes`` can be placed first-fit one after another (on a
        copy of ``space``: no mutation)."""
        trial = space.copy()
        for size in sizes:
            start = trial.first_fit(size)
            if start is None:
                return False
            trial.take(start, size)
        return True

    def swap_in(self, seq_id: int) -> list[Transfer]:
        """Re-reserve the full region at the lowest device hole that fits and copy the
        tokens back. Returns the move of the held slots (one range). Raises
        OutOfBlocks (nothing changed), UnknownSequence, InvalidRequest (not swapped)."""
        sid = self._lookup(seq_id)
        if self._where[sid] != ON_CPU:
            raise InvalidRequest(f"sequence {sid} is not swapped out")
        size, held, src = int(self._reserved[sid]), int(self._tokens[sid]), int(self._start[sid])
        dst = self._device.first_fit(size)
        if dst is None:
            raise self._out_of_slots(f"swap in sequence {sid}", size, self._device)
        self._device.take(dst, size)
        self._cpu.release(src, held)
        self.slots[dst : dst + held] = self.cpu_slots[src : src + held]
        self._where[sid], self._start[sid] = ON_DEVICE, dst
        self._account(sid, +1)
        return [Transfer(src, dst, CPU, GPU, count=held)] if held else []
