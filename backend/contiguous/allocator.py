"""Contiguous reservation baselines: what paging is measured against.

Each request gets ONE contiguous region of the KV pool, sized up front by a reservation
mode (see modes.py: ``max``, ``pow2``, ``oracle``). The pool is one linear address space
of ``num_slots`` token slots (``block_size`` 1, so a "block" is a slot). Regions are
placed first-fit: the lowest free hole that is large enough. Free space is kept as a
sorted list of merged holes (slot_space.py), so placement and the usage split cost
O(holes) <= O(live sequences + 1), never O(num_slots).

Block tables and moves are in slots: ``block_table(seq)`` is ``[start, length]`` of the
region (on the device: the reservation; while swapped out: the CPU copy, which holds only
the tokens), and a region moves as one :class:`Transfer` of ``count`` slots (``src``
slot -> ``dst`` slot onward), so a cost model prices the bytes it moves, not a block per
slot.

A request is admitted only if prompt + true output length <= ``max_model_len`` (its
reservation then always covers it); the engine rejects what can never fit before asking
(the simulator's ``Replica.never_fits``, sizing with :meth:`reservation_size`), because
``allocate`` answers such a request with :class:`OutOfBlocks` like any other "not now".
Appending past the reservation (which the engine never does for an admitted request)
still works: see growth.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from backend.base import (
    InvalidRequest,
    KVUsage,
    OutOfBlocks,
    ReservingAllocator,
    as_tokens,
    check_count,
)
from backend.contiguous.growth import Growth
from backend.contiguous.modes import MODES, NAMES, reserved_slots
from backend.contiguous.regions import NOT_LIVE, ON_CPU, ON_DEVICE, will_fill
from backend.contiguous.swap import Swap
from backend.transfer import Transfer


class ContiguousAllocator(Growth, Swap, ReservingAllocator):
    """One contiguous, first-fit region per sequence, sized by a reservation ``mode``.

    Per-sequence state lives in numpy arrays indexed by sequence id (see regions.py).
    ``slots`` (device) and ``cpu_slots`` hold every token written, so ``read_tokens``
    really reads through the region. ``peak_used_blocks`` is the most slots ever
    reserved at once. Growth and swap are mixins (growth.py, swap.py).
    """

    #: Contiguous regions hold token ids but never read them (no prefix caching).
    reads_token_ids = False

    block_table_layout = "region"

    def __init__(self, num_slots: int, *, mode: str, max_model_len: int, num_cpu_slots: int = 0):
        if mode not in MODES:
            raise InvalidRequest(f"unknown reservation mode {mode!r}; valid: {', '.join(MODES)}")
        self.block_size = 1
        self.num_blocks = check_count("num_slots", num_slots, 1)
        self.num_cpu_blocks = check_count("num_cpu_slots", num_cpu_slots, 0)  # slots
        self.max_model_len = check_count("max_model_len", max_model_len, 1)
        self.mode = mode
        super().__init__(self.num_blocks, self.num_cpu_blocks)

    @property
    def peak_used_blocks(self) -> int:
        return self._peak_slots

    # -- sizing ----------------------------------------------------------------------
    def reservation_size(self, prompt_len: int, max_new_tokens: int) -> int:
        """Slots this allocator reserves for such a request (by its mode), capped at
        max_model_len. No mutation; InvalidRequest for a bad length."""
        prompt_len = check_count("prompt_len", prompt_len, 0)
        max_new_tokens = check_count("max_new_tokens", max_new_tokens, 0)
        return reserved_slots(self.mode, self.max_model_len, prompt_len, max_new_tokens)

    def _fits_model(self, prompt_len: int, max_new_tokens: int) -> bool:
        """Whether the request's full length (prompt + true output) fits max_model_len."""
        return prompt_len + max_new_tokens <= self.max_model_len

    def _admissible_size(self, prompt_len: int, max_new_tokens: int) -> int:
        """The reservation for a new request; OutOfBlocks if it exceeds max_model_len."""
        size = self.reservation_size(prompt_len, max_new_tokens)
        if not self._fits_model(prompt_len, max_new_tokens):
            raise OutOfBlocks(
                f"prompt {prompt_len} + output {max_new_tokens} tokens exceed "
                f"max_model_len {self.max_model_len}",
                needed=prompt_len + max_new_tokens,
                available=self.max_model_len,
            )
        return size

    # -- allocation ----------------------------------------------------------------------
    def can_allocate(
        self, token_ids: Sequence[int] | np.ndarray, *, salt: int = 0, max_new_tokens: int = 0
    ) -> bool:
        prompt_len = as_tokens(token_ids).shape[0]
        max_new_tokens = check_count("max_new_tokens", max_new_tokens, 0)
        if not self._fits_model(prompt_len, max_new_tokens):
            return False
        return self._device.first_fit(self.reservation_size(prompt_len, max_new_tokens)) is not None

    def allocate(
        self,
        seq_id: int,
        token_ids: Sequence[int] | np.ndarray,
        *,
        salt: int = 0,
        max_new_tokens: int = 0,
        computed_tokens: int | None = None,
    ) -> int:
        """Reserve a region of ``reservation_size(prompt, max_new_tokens)`` slots at the
        lowest hole that fits and write the prompt into it. ``max_new_tokens`` is the
        request's true output length. No prefix caching: always returns 0 (and
        ``computed_tokens`` does not matter).

        Raises OutOfBlocks (no hole fits, or prompt + output > max_model_len; nothing
        changed), DuplicateSequence, InvalidRequest."""
        sid = self._new_id(seq_id)
        tokens = as_tokens(token_ids)
        max_new_tokens = check_count("max_new_tokens", max_new_tokens, 0)
        size = self._admissible_size(tokens.shape[0], max_new_tokens)
        start = self._device.first_fit(size)
        if start is None:
            raise self._out_of_slots(f"allocate sequence {sid}", size, self._device)
        self._device.take(start, size)
        self._place(sid, start, size, tokens, tokens.shape[0] + max_new_tokens)
        return 0

    def cached_prefix_tokens(self, token_ids: Sequence[int] | np.ndarray, *, salt: int = 0) -> int:
        as_tokens(token_ids)
        return 0

    # -- sharing and release ---------------------------------------------------------------
    def fork(self, parent_id: int, child_id: int) -> list[Transfer]:
        """Give ``child_id`` its own region of the parent's reservation size (lowest hole
        that fits) holding a copy of the parent's tokens; returns one move of the copied
        slots (parent region -> child region; none for an empty parent). The child
        inherits the parent's true length.
        Raises UnknownSequence, DuplicateSequence, InvalidRequest (parent swapped out),
        OutOfBlocks (no hole fits; nothing changed)."""
        parent = self._on_device(parent_id)
        child = self._new_id(child_id)
        size, held = int(self._reserved[parent]), int(self._tokens[parent])
        start = self._device.first_fit(size)
        if start is None:
            raise self._out_of_slots(f"fork sequence {parent}", size, self._device)
        self._device.take(start, size)
        src = int(self._start[parent])
        tokens = self.slots[src : src + held].copy()
        self._place(child, start, size, tokens, int(self._target[parent]))
        return [Transfer(src, start, count=held)] if held else []

    def free(self, seq_id: int) -> None:
        """Release the sequence's region (device or CPU). Raises UnknownSequence."""
        sid = self._lookup(seq_id)
        start = int(self._start[sid])
        if self._where[sid] == ON_DEVICE:
            self._account(sid, -1)
            self._device.release(start, int(self._reserved[sid]))
        else:
            self._cpu.release(start, int(self._tokens[sid]))
        self._where[sid] = NOT_LIVE

    # -- queries ---------------------------------------------------------------------------
    def is_swapped(self, seq_id: int) -> bool:
        return bool(self._where[self._lookup(seq_id)] == ON_CPU)

    def num_tokens(self, seq_id: int) -> int:
        return int(self._tokens[self._lookup(seq_id)])

    def block_table(self, seq_id: int) -> list[int]:
        """``[start, length]``: the device region (length = reservation), or while
        swapped out the CPU region (length = tokens held)."""
        sid = self._lookup(seq_id)
        on_device = self._where[sid] == ON_DEVICE
        length = self._reserved[sid] if on_device else self._tokens[sid]
        return [int(self._start[sid]), int(length)]

    def held_blocks(self, seq_id: int) -> int:
        """The device reservation's slots (0 while swapped out)."""
        sid = self._lookup(seq_id)
        return int(self._reserved[sid]) if self._where[sid] == ON_DEVICE else 0

    def read_tokens(self, seq_id: int) -> np.ndarray:
        sid = self._lookup(seq_id)
        memory = self.slots if self._where[sid] == ON_DEVICE else self.cpu_slots
        start = int(self._start[sid])
        return memory[start : start + int(self._tokens[sid])].copy()

    def usage(self, next_request_tokens: int = 0) -> KVUsage:
        """The device split in slots. Over-reservation (reservation minus the request's
        true length) is internal fragmentation; free slots in holes shorter than
        ``next_request_tokens`` (the head request's reservation, see
        :meth:`reservation_size`; 0 means none) are external fragmentation. O(holes)."""
        next_size = check_count("next_request_tokens", next_request_tokens, 0)
        free = self._device.free_total
        external = self._device.free_in_holes_smaller_than(next_size) if next_size else 0
        return KVUsage(
            total_slots=self.num_blocks,
            token_slots=self._token_slots,
            reserved_slots=self._fill_slots - self._token_slots,
            internal_frag_slots=self._used_slots - self._fill_slots,
            external_frag_slots=external,
            free_slots=free - external,
            cached_slots=0,
            used_blocks=self._used_slots,
            cached_blocks=0,
            free_blocks=free,
        )

    def check_invariants(self) -> None:
        """Regions within bounds and disjoint, holes + regions tile each address space,
        every region holds 1..reservation tokens, running sums match a recount."""
        live = np.flatnonzero(self._where != NOT_LIVE)
        on_device = live[self._where[live] == ON_DEVICE]
        on_cpu = live[self._where[live] == ON_CPU]
        tokens, reserved = self._tokens, self._reserved
        assert np.all(tokens[live] >= 1), "a live sequence holds no token"
        assert np.all(tokens[live] <= reserved[live]), "tokens beyond the reservation"
        assert np.all(self._target[live] >= 1), "bad true length"
        self._device.check(list(zip(self._start[on_device].tolist(), reserved[on_device].tolist())))
        self._cpu.check(list(zip(self._start[on_cpu].tolist(), tokens[on_cpu].tolist())))
        fill = will_fill(reserved[on_device], self._target[on_device], tokens[on_device])
        assert self._used_slots == int(reserved[on_device].sum()), "used counter drifted"
        assert self._token_slots == int(tokens[on_device].sum()), "token counter drifted"
        assert self._fill_slots == int(fill.sum()), "fill counter drifted"
        assert self._peak_slots >= self._used_slots, "peak below current use"


def make_contiguous(
    name: str, num_slots: int, *, max_model_len: int, num_cpu_slots: int = 0
) -> ContiguousAllocator:
    """Build the baseline registered as ``name`` (one of :data:`NAMES`)."""
    if name not in NAMES:
        raise InvalidRequest(f"unknown contiguous allocator {name!r}; valid: {', '.join(NAMES)}")
    return ContiguousAllocator(
        num_slots, mode=NAMES[name], max_model_len=max_model_len, num_cpu_slots=num_cpu_slots
    )
