"""The numpy-ring free list behaves exactly like a FIFO queue (a deque), wrap-around
included."""

from __future__ import annotations

from collections import deque

from hypothesis import given
from hypothesis import strategies as st

from backend.blocks.freelist import FreeList


def test_starts_full_in_ascending_order_and_takes_from_the_front():
    free = FreeList(5)
    assert list(free) == [0, 1, 2, 3, 4] and len(free) == 5
    assert free.take(2).tolist() == [0, 1]
    assert free.take_one() == 2
    free.put([1, 0])
    assert list(free) == [3, 4, 1, 0]


def test_an_empty_pool():
    free = FreeList(0)
    assert len(free) == 0 and list(free) == [] and free.take(0).tolist() == []
    free.put([])
    assert len(free) == 0


@given(capacity=st.integers(1, 9), ops=st.lists(st.tuples(st.booleans(), st.integers(0, 9))))
def test_matches_a_deque(capacity, ops):
    free, model = FreeList(capacity), deque(range(capacity))
    taken: list[int] = []
    for take, count in ops:
        if take:
            count = min(count, len(model))
            got = [free.take_one()] if count == 1 else free.take(count).tolist()
            assert got == [model.popleft() for _ in range(count)]
            taken.extend(got)
        else:  # give back the oldest taken blocks (never one that is already free)
            back, taken = taken[:count], taken[count:]
            free.put(back)
            model.extend(back)
        assert list(free) == list(model) and len(free) == len(model)
