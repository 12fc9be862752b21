"""The free holes of one linear address space of token slots (first-fit placement)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right


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
