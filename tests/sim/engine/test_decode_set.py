"""The engine's decode set: each field attribute is its own row of the array, through
every way rows join and leave (the attributes are rebound by unpacking, in FIELDS order)."""

import numpy as np

from sim.engine.replica_state import DecodeSet


def _rows(first: int, count: int) -> list[tuple[int, ...]]:
    """Rows whose every field is distinct: field f of row r is 100 * r + f."""
    width = len(DecodeSet.FIELDS)
    return [tuple(100 * r + f for f in range(width)) for r in range(first, first + count)]


def _assert_fields_match(d: DecodeSet) -> None:
    for index, name in enumerate(DecodeSet.FIELDS):
        np.testing.assert_array_equal(getattr(d, name), d.data[index], err_msg=name)
        assert getattr(d, name).base is not None  # a view: in-place updates reach the set


def test_fields_follow_extend_and_take():
    d = DecodeSet()
    _assert_fields_match(d)
    d.extend(_rows(0, 5))
    _assert_fields_match(d)
    assert d.seq_id.tolist() == [0, 100, 200, 300, 400]
    assert d.token_step.tolist() == [100 * r + 8 for r in range(5)]

    taken = d.take(d.seq_id % 200 == 0)  # rows 0, 2, 4 leave, in order
    assert list(taken) == list(DecodeSet.FIELDS)
    assert taken["req_id"].tolist() == [1, 201, 401]
    assert len(d) == 2 and d.seq_id.tolist() == [100, 300]
    _assert_fields_match(d)

    columns = {name: np.array([7 + i, 8 + i]) for i, name in enumerate(DecodeSet.FIELDS)}
    d.extend(columns)  # as column arrays (a swapped request's rows coming back)
    assert d.tenant.tolist() == [107, 307, 14, 15]
    _assert_fields_match(d)


def test_in_place_updates_reach_the_array():
    d = DecodeSet()
    d.extend(_rows(0, 3))
    np.add(d.generated, 1, out=d.generated)
    assert d.data[DecodeSet.FIELDS.index("generated")].tolist() == [5, 105, 205]
    assert d.take(np.zeros(3, dtype=bool))["seq_id"].size == 0  # nothing taken, nothing lost
    assert len(d) == 3
