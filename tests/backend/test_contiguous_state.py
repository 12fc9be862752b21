"""Stateful property test: the contiguous allocator against a slot-by-slot shadow model.

The shadow keeps an owner per slot (a plain list, fine for tiny address spaces) and
places regions by scanning slot by slot, an independent implementation of first-fit.
Every placement, move list and refusal of the allocator must match it exactly.
"""

import numpy as np
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from backend.base import InvalidRequest, OutOfBlocks
from backend.contiguous import ContiguousAllocator, SlotSpace
from backend.transfer import CPU, GPU, Transfer

TOKENS = st.lists(st.integers(0, 1000), min_size=1, max_size=6)


def state_of(alloc):
    """Everything the allocator holds, bit for bit, as a comparable value."""
    parts = {}
    for name, value in vars(alloc).items():
        if isinstance(value, np.ndarray):
            parts[name] = (value.dtype.str, value.shape, value.tobytes())
        elif isinstance(value, SlotSpace):
            parts[name] = (value.size, value.free_total, tuple(value.starts), tuple(value.lens))
        else:
            parts[name] = value
    return parts


def first_fit(owner, size):
    """Lowest start of ``size`` consecutive free slots, scanning slot by slot."""
    for start in range(len(owner) - size + 1):
        if all(slot is None for slot in owner[start : start + size]):
            return start
    return None


def holes(owner):
    """Lengths of the maximal runs of free slots."""
    runs, length = [], 0
    for slot in [*owner, "end"]:
        if slot is None:
            length += 1
        elif length:
            runs.append(length)
            length = 0
    return runs


def region_move(src: int, dst: int, held: int, *media) -> list[Transfer]:
    """The move of a region's ``held`` slots: one range (none for an empty region), so a
    cost model prices its bytes, not a block a slot."""
    return [Transfer(src, dst, *media, count=held)] if held else []


class Seq:
    def __init__(self, tokens, start, reserved, target):
        self.tokens, self.start, self.reserved, self.target = tokens, start, reserved, target
        self.swapped = False


class ContiguousMachine(RuleBasedStateMachine):
    seqs = Bundle("seqs")

    @initialize(
        target=seqs,
        first_prompt=TOKENS,
        num_slots=st.integers(4, 24),
        extra_len=st.integers(-3, 4),
        mode=st.sampled_from(["max", "pow2", "oracle"]),
        num_cpu_slots=st.integers(0, 12),
    )
    def setup(self, first_prompt, num_slots, extra_len, mode, num_cpu_slots):
        # max_model_len may exceed the pool (requests that can never fit), except in
        # "max" mode where nothing at all would then be admitted
        max_model_len = max(2, num_slots + extra_len)
        if mode == "max":
            max_model_len = min(max_model_len, num_slots)
        self.alloc = ContiguousAllocator(
            num_slots, mode=mode, max_model_len=max_model_len, num_cpu_slots=num_cpu_slots
        )
        self.fresh = state_of(self.alloc)
        self.owner = [None] * num_slots
        self.cpu_owner = [None] * num_cpu_slots
        self.shadow: dict[int, Seq] = {}
        self.next_id = 0
        self.peak = 0
        # start with a live sequence so that the rules needing one are enabled at once
        return self.allocate(first_prompt[: min(num_slots, max_model_len)], 0)

    # -- the shadow model's arithmetic -------------------------------------------------
    def reservation(self, prompt_len, output_len):
        mode, cap = self.alloc.mode, self.alloc.max_model_len
        if mode == "max":
            return cap
        output = output_len
        if mode == "pow2" and output_len:
            output = 1
            while output < output_len:
                output *= 2
        return min(prompt_len + output, cap)

    def mark(self, owner, start, size, sid):
        for slot in range(start, start + size):
            assert (owner[slot] is None) != (sid is None)
            owner[slot] = sid

    def used(self):
        return sum(s.reserved for s in self.shadow.values() if not s.swapped)

    def note_peak(self):
        self.peak = max(self.peak, self.used())

    def refused(self, what, call):
        """Run ``call``, expect OutOfBlocks, and check nothing changed."""
        event(f"refused: {what}")
        before = state_of(self.alloc)
        try:
            call()
        except OutOfBlocks:
            pass
        else:
            raise AssertionError("expected OutOfBlocks")
        assert state_of(self.alloc) == before

    def misuse(self, call):
        before = state_of(self.alloc)
        try:
            call()
        except InvalidRequest:
            pass
        else:
            raise AssertionError("expected InvalidRequest")
        assert state_of(self.alloc) == before

    def plan_growth(self, owner, seq, needed):
        """Shadow of region growth: in place, else relocate first-fit, else None."""
        end, extra = seq.start + seq.reserved, needed - seq.reserved
        if end + extra <= len(owner) and all(o is None for o in owner[end : end + extra]):
            return seq.start
        return first_fit(owner, needed)

    def grow(self, sid, new_start, needed):
        """Apply a planned growth to the shadow; return the expected moves."""
        seq = self.shadow[sid]
        self.mark(self.owner, seq.start, seq.reserved, None)
        self.mark(self.owner, new_start, needed, sid)
        moves = []
        if new_start != seq.start:
            event("growth relocated")
            moves = region_move(seq.start, new_start, len(seq.tokens))
        seq.start, seq.reserved = new_start, needed
        return moves

    # -- rules ---------------------------------------------------------------------------
    @rule(target=seqs, tokens=TOKENS, output_len=st.integers(0, 6))
    def allocate(self, tokens, output_len):
        sid, self.next_id = self.next_id, self.next_id + 1
        size = self.reservation(len(tokens), output_len)
        fits_model = len(tokens) + output_len <= self.alloc.max_model_len
        start = first_fit(self.owner, size) if fits_model else None
        assert self.alloc.reservation_size(len(tokens), output_len) == size
        assert self.alloc.can_allocate(tokens, max_new_tokens=output_len) == (start is not None)
        if start is None:
            call = lambda: self.alloc.allocate(sid, tokens, max_new_tokens=output_len)  # noqa: E731
            self.refused("allocate", call)
            return multiple()
        assert self.alloc.allocate(sid, np.array(tokens), max_new_tokens=output_len) == 0
        self.mark(self.owner, start, size, sid)
        self.shadow[sid] = Seq(list(tokens), start, size, len(tokens) + output_len)
        self.note_peak()
        return sid

    @rule(seq=seqs, tokens=st.lists(st.integers(0, 1000), min_size=1, max_size=3))
    def append(self, seq, tokens):
        shadow = self.shadow[seq]
        if shadow.swapped:
            assert not self.alloc.can_append(seq, len(tokens))
            self.misuse(lambda: self.alloc.append(seq, tokens))
            return
        needed = len(shadow.tokens) + len(tokens)
        new_start = shadow.start
        if needed > shadow.reserved:
            new_start = self.plan_growth(self.owner, shadow, needed)
        assert self.alloc.can_append(seq, len(tokens)) == (new_start is not None)
        if new_start is None:
            self.refused("append", lambda: self.alloc.append(seq, tokens))
            return
        moves = self.alloc.append(seq, tokens)
        expected = self.grow(seq, new_start, needed) if needed > shadow.reserved else []
        assert moves == expected
        shadow.tokens += tokens
        self.note_peak()

    def plan_batch_growth(self, full):
        """Plan one-slot growths sequentially on a copy of the owners, as the allocator
        must; None if any fails."""
        owner, plan = list(self.owner), []
        for sid in full:
            seq = self.shadow[sid]
            new_start = self.plan_growth(owner, seq, seq.reserved + 1)
            if new_start is None:
                return None
            self.mark(owner, seq.start, seq.reserved, None)
            self.mark(owner, new_start, seq.reserved + 1, sid)
            plan.append((sid, new_start))
        return plan

    @precondition(lambda self: any(not s.swapped for s in self.shadow.values()))
    @rule(data=st.data())
    def append_batch(self, data):
        on_device = sorted(sid for sid, s in self.shadow.items() if not s.swapped)
        ids = data.draw(st.lists(st.sampled_from(on_device), unique=True, max_size=5))
        tokens = data.draw(st.lists(st.integers(0, 1000), min_size=len(ids), max_size=len(ids)))
        full = [sid for sid in ids if len(self.shadow[sid].tokens) == self.shadow[sid].reserved]
        assert self.alloc.blocks_needed_for_batch(np.array(ids, dtype=np.int64)) == len(full)
        plan = self.plan_batch_growth(full)
        if plan is None:
            batch = (np.array(ids), np.array(tokens))
            self.refused("append_batch", lambda: self.alloc.append_batch(*batch))
            return
        moves = self.alloc.append_batch(np.array(ids, dtype=np.int64), np.array(tokens))
        expected = []
        for sid, new_start in plan:
            expected += self.grow(sid, new_start, self.shadow[sid].reserved + 1)
        assert moves == expected
        for sid, token in zip(ids, tokens):
            self.shadow[sid].tokens.append(token)
        self.note_peak()

    @rule(target=seqs, parent=seqs)
    def fork(self, parent):
        shadow = self.shadow[parent]
        child, self.next_id = self.next_id, self.next_id + 1
        if shadow.swapped:
            self.misuse(lambda: self.alloc.fork(parent, child))
            return multiple()
        start = first_fit(self.owner, shadow.reserved)
        if start is None:
            self.refused("fork", lambda: self.alloc.fork(parent, child))
            return multiple()
        moves = self.alloc.fork(parent, child)
        held = len(shadow.tokens)
        assert moves == region_move(shadow.start, start, held)
        self.mark(self.owner, start, shadow.reserved, child)
        self.shadow[child] = Seq(list(shadow.tokens), start, shadow.reserved, shadow.target)
        self.note_peak()
        return child

    @rule(seq=consumes(seqs))
    def free(self, seq):
        shadow = self.shadow.pop(seq)
        self.alloc.free(seq)
        if shadow.swapped:
            self.mark(self.cpu_owner, shadow.start, len(shadow.tokens), None)
        else:
            self.mark(self.owner, shadow.start, shadow.reserved, None)

    @rule(seq=seqs)
    def swap_out(self, seq):
        shadow = self.shadow[seq]
        if shadow.swapped:
            assert not self.alloc.can_swap_out(seq)
            self.misuse(lambda: self.alloc.swap_out(seq))
            return
        held = len(shadow.tokens)
        dst = first_fit(self.cpu_owner, held)
        assert self.alloc.can_swap_out(seq) == (dst is not None)
        if dst is None:
            self.refused("swap_out", lambda: self.alloc.swap_out(seq))
            return
        assert self.alloc.swap_out(seq) == region_move(shadow.start, dst, held, GPU, CPU)
        self.mark(self.owner, shadow.start, shadow.reserved, None)
        self.mark(self.cpu_owner, dst, held, seq)
        shadow.start, shadow.swapped = dst, True

    @rule(seq=seqs)
    def swap_in(self, seq):
        shadow = self.shadow[seq]
        if not shadow.swapped:
            assert not self.alloc.can_swap_in(seq)
            self.misuse(lambda: self.alloc.swap_in(seq))
            return
        dst = first_fit(self.owner, shadow.reserved)
        assert self.alloc.can_swap_in(seq) == (dst is not None)
        if dst is None:
            self.refused("swap_in", lambda: self.alloc.swap_in(seq))
            return
        held = len(shadow.tokens)
        assert self.alloc.swap_in(seq) == region_move(shadow.start, dst, held, CPU, GPU)
        self.mark(self.cpu_owner, shadow.start, held, None)
        self.mark(self.owner, dst, shadow.reserved, seq)
        shadow.start, shadow.swapped = dst, False
        self.note_peak()

    # -- invariants ------------------------------------------------------------------------
    @invariant()
    def internally_consistent(self):
        self.alloc.check_invariants()

    @invariant()
    def reads_back_what_was_written_where_the_shadow_placed_it(self):
        for sid, shadow in self.shadow.items():
            assert self.alloc.read_tokens(sid).tolist() == shadow.tokens
            assert self.alloc.num_tokens(sid) == len(shadow.tokens)
            assert self.alloc.is_swapped(sid) == shadow.swapped
            length = len(shadow.tokens) if shadow.swapped else shadow.reserved
            assert self.alloc.block_table(sid) == [shadow.start, length]

    @invariant()
    def usage_matches_the_shadow_and_sums_to_the_pool(self):
        on_device = [s for s in self.shadow.values() if not s.swapped]
        held = sum(len(s.tokens) for s in on_device)
        fill = sum(min(s.reserved, max(s.target, len(s.tokens))) for s in on_device)
        runs = holes(self.owner)
        for next_size in {0, 1, 3, len(self.owner) // 2, len(self.owner)}:
            usage = self.alloc.usage(next_size)
            external = sum(r for r in runs if r < next_size) if next_size else 0
            assert usage.token_slots == held
            assert usage.reserved_slots == fill - held
            assert usage.internal_frag_slots == self.used() - fill
            assert usage.external_frag_slots == external
            assert usage.free_blocks == sum(runs) == usage.total_slots - self.used()
            assert usage.used_blocks == self.used()
            assert min(usage) >= 0
            assert (
                usage.token_slots
                + usage.reserved_slots
                + usage.internal_frag_slots
                + usage.external_frag_slots
                + usage.free_slots
                == usage.total_slots
            )
        assert self.alloc.peak_used_blocks == self.peak

    def teardown(self):
        if not hasattr(self, "alloc"):
            return
        for sid in list(self.shadow):
            self.alloc.free(sid)
        self.alloc.check_invariants()
        after = state_of(self.alloc)
        per_seq = {"_where", "_start", "_reserved", "_tokens", "_target"}
        ignored = per_seq | {"slots", "cpu_slots", "_peak_slots"}
        assert {k: v for k, v in after.items() if k not in ignored} == {
            k: v for k, v in self.fresh.items() if k not in ignored
        }
        assert not self.alloc._where.any()  # no sequence left live


TestContiguousMachine = ContiguousMachine.TestCase
