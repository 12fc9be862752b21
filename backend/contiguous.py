"""Contiguous reservation baselines: what paging is measured against.

Before paging, a serving engine gave each request one contiguous region of the KV pool,
sized up front because the output length is unknown when the request starts. How much
that wastes depends on how the region is sized, which is the ``mode``:

* ``"max"``: ``max_model_len`` slots for every request (what static engines did);
* ``"pow2"``: the prompt plus the next power of two >= the true output length, so the
  output part is over-reserved by less than 2x (a generous "good guess" baseline);
* ``"oracle"``: exactly prompt + true output length (no internal waste at all; only
  external fragmentation remains, which paging also removes).

The pool is ONE linear address space of ``num_slots`` token slots (``block_size`` 1, so
a "block" is a slot). Regions are placed first-fit: the lowest free hole that is large
enough. Free space is kept as a sorted list of merged holes, so placement and the usage
split cost O(holes) <= O(live sequences + 1), never O(num_slots).

Block tables and moves are in slots: ``block_table(seq)`` is ``[start, length]`` of the
region (on the device: the reservation; while swapped out: the CPU copy, which holds only
the tokens), and every :class:`BlockMove` copies ONE slot (``src`` slot -> ``dst`` slot),
one move per token copied. Simple and obviously correct; an executor may coalesce runs.

A request is admitted only if prompt + true output length <= ``max_model_len`` (its
reservation then always covers it); the engine rejects what can never fit before asking
(``sim.engine.Replica.never_fits``, sizing with :meth:`reservation_size`), because
``allocate`` answers such a request with :class:`OutOfBlocks` like any other "not now".
Appending past the reservation (which the engine never does for an admitted request)
still works: see :meth:`append`.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence

import numpy as np

from backend.base import (
    Allocator,
    BlockMove,
    DuplicateSequence,
    InvalidRequest,
    KVUsage,
    OutOfBlocks,
    UnknownSequence,
    as_tokens,
    check_count,
    grow_arrays,
    indexes,
)

#: reservation modes and the registered allocator names that select them
MODES = ("max", "pow2", "oracle")
NAMES = {"contiguous-max": "max", "contiguous-pow2": "pow2", "contiguous-oracle": "oracle"}

_NOT_LIVE, _ON_DEVICE, _ON_CPU = 0, 1, 2


class SlotSpace:
    """The free holes of one linear address space of ``size`` slots.

    Holes are kept sorted by start and merged (no two holes touch), as two parallel
    lists, so first-fit is one scan and a release merges with its neighbours in
    O(log holes) search plus one list insert/delete.
    """

    def __init__(self, size: int):
        self.size = size
        self.starts: list[int] = [0] if size else []
        self.lens: list[int] = [size] if size else []
        self.free_total = size

    def copy(self) -> SlotSpace:
        clone = SlotSpace(0)
        clone.size, clone.free_total = self.size, self.free_total
        clone.starts, clone.lens = list(self.starts), list(self.lens)
        return clone

    def first_fit(self, size: int) -> int | None:
        """Start of the lowest hole of at least ``size`` slots, or None. No mutation."""
        for start, length in zip(self.starts, self.lens):
            if length >= size:
                return start
        return None

    def largest_hole(self) -> int:
        return max(self.lens, default=0)

    def hole_at(self, pos: int) -> int:
        """Length of the hole starting exactly at ``pos`` (0 if none). No mutation."""
        i = bisect_left(self.starts, pos)
        return self.lens[i] if i < len(self.starts) and self.starts[i] == pos else 0

    def free_in_holes_smaller_than(self, size: int) -> int:
        """Free slots lying in holes shorter than ``size``. No mutation."""
        return sum(length for length in self.lens if length < size)

    def take(self, start: int, size: int) -> None:
        """Mark ``[start, start + size)`` used; it must lie inside one hole (else a bug)."""
        i = bisect_right(self.starts, start) - 1
        assert i >= 0, "take outside a hole"
        hole_start, hole_len = self.starts[i], self.lens[i]
        assert start + size <= hole_start + hole_len, "take outside a hole"
        del self.starts[i], self.lens[i]
        after = hole_start + hole_len - (start + size)
        if after:
            self.starts.insert(i, start + size)
            self.lens.insert(i, after)
        if start > hole_start:
            self.starts.insert(i, hole_start)
            self.lens.insert(i, start - hole_start)
        self.free_total -= size

    def release(self, start: int, size: int) -> None:
        """Return ``[start, start + size)`` to the holes, merging with touching holes."""
        self.free_total += size
        i = bisect_left(self.starts, start)
        assert i == len(self.starts) or start + size <= self.starts[i], "double release"
        if i < len(self.starts) and start + size == self.starts[i]:
            size += self.lens[i]  # absorb the hole right after
            del self.starts[i], self.lens[i]
        if i > 0 and self.starts[i - 1] + self.lens[i - 1] == start:
            self.lens[i - 1] += size  # extend the hole right before
        else:
            assert i == 0 or self.starts[i - 1] + self.lens[i - 1] < start, "double release"
            self.starts.insert(i, start)
            self.lens.insert(i, size)

    def check(self, regions: list[tuple[int, int]]) -> None:
        """Assert the holes are sorted, merged, positive and, with ``regions`` (start,
        length), tile ``[0, size)`` exactly."""
        assert len(self.starts) == len(self.lens)
        assert all(length > 0 for length in self.lens), "empty hole"
        assert sum(self.lens) == self.free_total, "free counter drifted"
        for (s0, l0), s1 in zip(zip(self.starts, self.lens), self.starts[1:]):
            assert s0 + l0 < s1, "holes overlap, touch or are unsorted"
        pieces = sorted([*regions, *zip(self.starts, self.lens)])
        pos = 0
        for start, length in pieces:
            assert length > 0 and start == pos, f"gap or overlap at slot {pos}"
            pos = start + length
        assert pos == self.size, "regions and holes do not cover the address space"


def _next_pow2(n: int) -> int:
    """Smallest power of two >= n, and 0 for 0 (nothing to generate, nothing reserved)."""
    return 0 if n == 0 else 1 << (n - 1).bit_length()


def _will_fill(reserved, target, tokens):
    """Slots of a region that hold or will hold a token: up to the true final length
    (``target``), or what it already holds if it was appended past that."""
    return np.minimum(reserved, np.maximum(target, tokens))


class ContiguousAllocator(Allocator):
    """One contiguous, first-fit region per sequence, sized by a reservation ``mode``.

    Per-sequence state lives in numpy arrays indexed by sequence id (ids are expected to
    be small and dense, as the engine numbers sequences from 0), so a decode step over
    the running batch is a handful of vector operations. ``slots`` (device) and
    ``cpu_slots`` hold every token written, so ``read_tokens`` really reads through the
    region. ``peak_used_blocks`` is the most slots ever reserved at once.
    """

    def __init__(self, num_slots: int, *, mode: str, max_model_len: int, num_cpu_slots: int = 0):
        if mode not in MODES:
            raise InvalidRequest(f"unknown reservation mode {mode!r}; valid: {', '.join(MODES)}")
        self.block_size = 1
        self.num_blocks = check_count("num_slots", num_slots, 1)
        self.num_cpu_blocks = check_count("num_cpu_slots", num_cpu_slots, 0)  # slots
        self.max_model_len = check_count("max_model_len", max_model_len, 1)
        self.mode = mode
        self.slots = np.zeros(self.num_blocks, dtype=np.int32)
        self.cpu_slots = np.zeros(self.num_cpu_blocks, dtype=np.int32)
        self.peak_used_blocks = 0
        self._device = SlotSpace(self.num_blocks)
        self._cpu = SlotSpace(self.num_cpu_blocks)
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

    # -- sizing ----------------------------------------------------------------------
    def reservation_size(self, prompt_len: int, max_new_tokens: int) -> int:
        """Slots this allocator reserves for such a request, capped at max_model_len."""
        prompt_len = check_count("prompt_len", prompt_len, 0)
        max_new_tokens = check_count("max_new_tokens", max_new_tokens, 0)
        if self.mode == "max":
            return self.max_model_len
        output = max_new_tokens if self.mode == "oracle" else _next_pow2(max_new_tokens)
        return min(prompt_len + output, self.max_model_len)

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

    # -- sequence ids ------------------------------------------------------------------
    def _lookup(self, seq_id: int) -> int:
        """The id of a live sequence; UnknownSequence otherwise."""
        if not indexes(seq_id, self._where.shape[0]) or self._where[seq_id] == _NOT_LIVE:
            raise UnknownSequence(f"sequence {seq_id!r} is not live")
        return int(seq_id)

    def _on_device(self, seq_id: int) -> int:
        sid = self._lookup(seq_id)
        if self._where[sid] != _ON_DEVICE:
            raise InvalidRequest(f"sequence {sid} is swapped out")
        return sid

    def _new_id(self, seq_id: int) -> int:
        sid = check_count("sequence id", seq_id, 0)
        if sid < self._where.shape[0] and self._where[sid] != _NOT_LIVE:
            raise DuplicateSequence(f"sequence {sid} is already live")
        return sid

    def _ensure_capacity(self, sid: int) -> None:
        """Grow the per-sequence arrays so ``sid`` indexes them."""
        grow_arrays(self, ("_where", "_start", "_reserved", "_tokens", "_target"), sid + 1)

    # -- accounting --------------------------------------------------------------------
    def _account(self, ids, sign: int) -> None:
        """Add (+1) or remove (-1) device-resident sequences ``ids`` from the running sums.
        Callers remove before changing a sequence's fields and add back after."""
        reserved, tokens = self._reserved[ids], self._tokens[ids]
        fill = _will_fill(reserved, self._target[ids], tokens)
        self._used_slots += sign * int(np.sum(reserved))
        self._token_slots += sign * int(np.sum(tokens))
        self._fill_slots += sign * int(np.sum(fill))
        self.peak_used_blocks = max(self.peak_used_blocks, self._used_slots)

    def _place(self, sid: int, start: int, reserved: int, tokens: np.ndarray, target: int) -> None:
        """Record a new device-resident sequence in a region already taken."""
        self._ensure_capacity(sid)
        self._where[sid], self._start[sid], self._reserved[sid] = _ON_DEVICE, start, reserved
        self._tokens[sid], self._target[sid] = tokens.shape[0], target
        self.slots[start : start + tokens.shape[0]] = tokens
        self._account(sid, +1)

    def _out_of_slots(self, what: str, needed: int, space: SlotSpace) -> OutOfBlocks:
        available = space.largest_hole()
        return OutOfBlocks(
            f"{what}: no hole of {needed} slots (largest hole {available})",
            needed=needed,
            available=available,
        )

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

    # -- growth --------------------------------------------------------------------------
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

    def _resize(self, sid: int, new_start: int, needed: int) -> list[BlockMove]:
        """Point ``sid`` at its grown region, copying its tokens if it moved. The caller
        takes ``sid`` out of the usage sums before and puts it back after."""
        old_start, held = int(self._start[sid]), int(self._tokens[sid])
        self._start[sid], self._reserved[sid] = new_start, needed
        if new_start == old_start:
            return []
        self.slots[new_start : new_start + held] = self.slots[old_start : old_start + held]
        return [BlockMove(old_start + i, new_start + i) for i in range(held)]

    def can_append(self, seq_id: int, num_tokens: int = 1) -> bool:
        """Whether ``append`` of ``num_tokens`` would succeed now (False while swapped)."""
        sid = self._lookup(seq_id)
        num_tokens = check_count("num_tokens", num_tokens, 1)
        if self._where[sid] != _ON_DEVICE:
            return False
        start, reserved = int(self._start[sid]), int(self._reserved[sid])
        needed = int(self._tokens[sid]) + num_tokens
        if needed <= reserved:
            return True
        grows_in_place = self._device.hole_at(start + reserved) >= needed - reserved
        return grows_in_place or self._device.first_fit(needed) is not None

    def append(self, seq_id: int, token_ids: Sequence[int] | np.ndarray) -> list[BlockMove]:
        """Write tokens after the sequence's last one.

        Within the reservation nothing moves. Past it, the region grows to exactly the
        new length: in place when the slots right after it are free, else it is
        relocated first-fit and the returned moves copy every held slot (one move per
        slot, old -> new). Raises OutOfBlocks (neither possible; nothing changed),
        UnknownSequence, InvalidRequest (swapped out, bad tokens)."""
        sid = self._on_device(seq_id)
        tokens = as_tokens(token_ids)
        held = int(self._tokens[sid])
        needed = held + tokens.shape[0]
        moves: list[BlockMove] = []
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
        if (where != _ON_DEVICE).any():
            first_dead = ids[where == _NOT_LIVE]
            if first_dead.size:
                raise UnknownSequence(f"sequence {int(first_dead[0])} is not live")
            raise InvalidRequest(f"sequence {int(ids[where == _ON_CPU][0])} is swapped out")
        return ids

    def blocks_needed_for_batch(self, seq_ids: np.ndarray) -> int:
        """Slots beyond the reservations that one more token each would take (usually 0)."""
        ids = self._batch_ids(seq_ids)
        return int(np.count_nonzero(self._tokens[ids] >= self._reserved[ids]))

    def append_batch(self, seq_ids: np.ndarray, token_ids: np.ndarray) -> list[BlockMove]:
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

    def _grow_full(self, full: np.ndarray) -> list[BlockMove]:
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
        moves: list[BlockMove] = []
        self._account(full, -1)
        for sid, new_start, needed in plan:  # in planning order: later plans may reuse
            moves += self._resize(sid, new_start, needed)  # slots freed by earlier ones
        self._account(full, +1)
        return moves

    # -- sharing and release ---------------------------------------------------------------
    def fork(self, parent_id: int, child_id: int) -> list[BlockMove]:
        """Give ``child_id`` its own region of the parent's reservation size (lowest hole
        that fits) holding a copy of the parent's tokens; returns one move per copied
        slot (parent slot -> child slot). The child inherits the parent's true length.
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
        return [BlockMove(src + i, start + i) for i in range(held)]

    def free(self, seq_id: int) -> None:
        """Release the sequence's region (device or CPU). Raises UnknownSequence."""
        sid = self._lookup(seq_id)
        start = int(self._start[sid])
        if self._where[sid] == _ON_DEVICE:
            self._account(sid, -1)
            self._device.release(start, int(self._reserved[sid]))
        else:
            self._cpu.release(start, int(self._tokens[sid]))
        self._where[sid] = _NOT_LIVE

    # -- swap ----------------------------------------------------------------------------
    @property
    def num_free_cpu_blocks(self) -> int:
        return self._cpu.free_total

    def can_swap_out(self, *seq_ids: int) -> bool:
        sids = [self._lookup(seq_id) for seq_id in seq_ids]
        if any(self._where[sid] != _ON_DEVICE for sid in sids):
            return False
        return self._places_in_turn(self._cpu, [int(self._tokens[sid]) for sid in sids])

    def swap_out(self, seq_id: int) -> list[BlockMove]:
        """Copy the held tokens to the lowest CPU hole that fits them (only tokens travel,
        not the empty reservation) and release the device region; the reservation size
        is remembered for swap-in. Returns (device slot, CPU slot) moves, one per token.
        Raises OutOfBlocks (nothing changed), UnknownSequence, InvalidRequest."""
        sid = self._lookup(seq_id)
        if self._where[sid] != _ON_DEVICE:
            raise InvalidRequest(f"sequence {sid} is already swapped out")
        held, src = int(self._tokens[sid]), int(self._start[sid])
        dst = self._cpu.first_fit(held)
        if dst is None:
            raise self._out_of_slots(f"swap out sequence {sid}", held, self._cpu)
        self._cpu.take(dst, held)
        self.cpu_slots[dst : dst + held] = self.slots[src : src + held]
        self._account(sid, -1)
        self._device.release(src, int(self._reserved[sid]))
        self._where[sid], self._start[sid] = _ON_CPU, dst
        return [BlockMove(src + i, dst + i) for i in range(held)]

    def can_swap_in(self, *seq_ids: int) -> bool:
        sids = [self._lookup(seq_id) for seq_id in seq_ids]
        if any(self._where[sid] != _ON_CPU for sid in sids):
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

    def swap_in(self, seq_id: int) -> list[BlockMove]:
        """Re-reserve the full region at the lowest device hole that fits and copy the
        tokens back. Returns (CPU slot, device slot) moves, one per token. Raises
        OutOfBlocks (nothing changed), UnknownSequence, InvalidRequest (not swapped)."""
        sid = self._lookup(seq_id)
        if self._where[sid] != _ON_CPU:
            raise InvalidRequest(f"sequence {sid} is not swapped out")
        size, held, src = int(self._reserved[sid]), int(self._tokens[sid]), int(self._start[sid])
        dst = self._device.first_fit(size)
        if dst is None:
            raise self._out_of_slots(f"swap in sequence {sid}", size, self._device)
        self._device.take(dst, size)
        self._cpu.release(src, held)
        self.slots[dst : dst + held] = self.cpu_slots[src : src + held]
        self._where[sid], self._start[sid] = _ON_DEVICE, dst
        self._account(sid, +1)
        return [BlockMove(src + i, dst + i) for i in range(held)]

    # -- queries ---------------------------------------------------------------------------
    def is_swapped(self, seq_id: int) -> bool:
        return bool(self._where[self._lookup(seq_id)] == _ON_CPU)

    def num_tokens(self, seq_id: int) -> int:
        return int(self._tokens[self._lookup(seq_id)])

    def block_table(self, seq_id: int) -> list[int]:
        """``[start, length]``: the device region (length = reservation), or while
        swapped out the CPU region (length = tokens held)."""
        sid = self._lookup(seq_id)
        on_device = self._where[sid] == _ON_DEVICE
        length = self._reserved[sid] if on_device else self._tokens[sid]
        return [int(self._start[sid]), int(length)]

    def held_blocks(self, seq_id: int) -> int:
        """The device reservation's slots (0 while swapped out)."""
        sid = self._lookup(seq_id)
        return int(self._reserved[sid]) if self._where[sid] == _ON_DEVICE else 0

    def read_tokens(self, seq_id: int) -> np.ndarray:
        sid = self._lookup(seq_id)
        memory = self.slots if self._where[sid] == _ON_DEVICE else self.cpu_slots
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
        live = np.flatnonzero(self._where != _NOT_LIVE)
        on_device = live[self._where[live] == _ON_DEVICE]
        on_cpu = live[self._where[live] == _ON_CPU]
        tokens, reserved = self._tokens, self._reserved
        assert np.all(tokens[live] >= 1), "a live sequence holds no token"
        assert np.all(tokens[live] <= reserved[live]), "tokens beyond the reservation"
        assert np.all(self._target[live] >= 1), "bad true length"
        self._device.check(list(zip(self._start[on_device].tolist(), reserved[on_device].tolist())))
        self._cpu.check(list(zip(self._start[on_cpu].tolist(), tokens[on_cpu].tolist())))
        fill = _will_fill(reserved[on_device], self._target[on_device], tokens[on_device])
        assert self._used_slots == int(reserved[on_device].sum()), "used counter drifted"
        assert self._token_slots == int(tokens[on_device].sum()), "token counter drifted"
        assert self._fill_slots == int(fill.sum()), "fill counter drifted"
        assert self.peak_used_blocks >= self._used_slots, "peak below current use"


def make_contiguous(
    name: str, num_slots: int, *, max_model_len: int, num_cpu_slots: int = 0
) -> ContiguousAllocator:
    """Build the baseline registered as ``name`` (one of :data:`NAMES`)."""
    if name not in NAMES:
        raise InvalidRequest(f"unknown contiguous allocator {name!r}; valid: {', '.join(NAMES)}")
    return ContiguousAllocator(
        num_slots, mode=NAMES[name], max_model_len=max_model_len, num_cpu_slots=num_cpu_slots
    )
