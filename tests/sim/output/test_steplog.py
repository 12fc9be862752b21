"""The step log's storage: typed columns in chunks, read in the order steps ended."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.engine.records import Limit, StepRecord
from sim.output.steplog import STEP_COLUMNS, STEP_DTYPES, StepLog


def step(i: int, replica: int = 0, **fields) -> StepRecord:
    """A step whose counts all derive from ``i`` (so rows are told apart)."""
    record = StepRecord(
        float(i),
        replica,
        0.5,
        i,
        2 * i,
        3 * i,
        4 * i,
        5 * i,
        6 * i,
        7 * i,
        8 * i,
        9 * i,
        10 * i,
        11 * i,
        12 * i,
        13 * i,
        14 * i,
        i % 3,
        Limit(i % 5),
    )
    return record._replace(**fields)


def rows_of(steps) -> np.ndarray:
    return np.array([tuple(s) for s in steps], dtype=float)


def test_columns_are_typed_and_read_back_exactly():
    log = StepLog()
    log.record(step(7, replica=2))
    assert STEP_DTYPES["time_s"] == np.float64 and STEP_DTYPES["limit"] == np.int8
    assert STEP_DTYPES["replica"] == np.int16 and STEP_DTYPES["free_slots"] == np.int32
    assert log.as_array().tolist() == [list(step(7, replica=2))]
    assert log.column("limit").tolist() == [Limit.TOKEN_BUDGET]


def test_records_across_chunk_edges_keep_every_row():
    log = StepLog(initial_capacity=2, chunk_rows=4)
    for i in range(11):
        log.record(step(i))
    # chunks of 2, 4, 4 and 4 rows: the log grew by adding them, 11 rows in 14
    assert (len(log), log.capacity) == (11, 14)
    assert log.column("batch_size").tolist() == list(range(11))
    assert log.column("free_slots", 1, 9).tolist() == [12 * i for i in range(1, 9)]
    assert log.column("time_s", 9, 100).tolist() == [9.0, 10.0]
    assert log.column("queue_len", 5, 5).shape == (0,)


def test_record_rows_spans_several_chunks():
    log = StepLog(initial_capacity=1, chunk_rows=3)
    log.record(step(0))
    stretch = [step(i) for i in range(1, 11)]
    log.record_rows(rows_of(stretch), [s.time_s + s.duration_s for s in stretch])
    log.record(step(11))
    assert len(log) == log.capacity == 12  # chunks of 1, 2, 3, 3 and 3 rows
    np.testing.assert_array_equal(log.as_array(), rows_of([step(i) for i in range(12)]))


def test_rows_are_read_in_the_order_steps_ended_ties_as_recorded():
    log = StepLog(initial_capacity=2, chunk_rows=2)
    log.record(step(1, replica=0), 3.0)
    log.record(step(2, replica=0), 4.0)
    # a stretch of replica 1 recorded after replica 0's later steps; one tie at 3.0
    stretch = [step(3, replica=1), step(4, replica=1), step(5, replica=1)]
    log.record_rows(rows_of(stretch), [1.0, 3.0, 5.0])
    assert log.column("batch_size").tolist() == [3, 1, 4, 2, 5]
    assert log.column("replica").tolist() == [1, 0, 1, 0, 1]
    # rows recorded after a read are sorted again, with the rows read before
    log.record(step(6, replica=0), 2.0)
    assert log.column("batch_size").tolist() == [3, 6, 1, 4, 2, 5]
    assert log.column("batch_size", 2, 5).tolist() == [1, 4, 2]


@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(0, 20), min_size=1, max_size=9),  # ends of one call, in steps
            st.booleans(),  # read after it (later rows are then sorted in with the sorted)
        ),
        min_size=1,
        max_size=12,
    ),
    st.integers(1, 5),
    st.integers(1, 7),
)
def test_any_mix_of_calls_and_reads_reads_like_a_stable_sort_by_end(calls, first, chunk):
    log = StepLog(initial_capacity=first, chunk_rows=chunk)
    recorded, ends = [], []
    for call, read in calls:
        steps = [step(len(recorded) + k, replica=k % 3) for k in range(len(call))]
        if len(call) == 1:
            log.record(steps[0], float(call[0]))
        else:
            log.record_rows(rows_of(steps), np.array(call, dtype=float))
        recorded += steps
        ends += call
        if read:
            log.column("time_s")
    order = sorted(range(len(recorded)), key=ends.__getitem__)  # Python's sort is stable
    np.testing.assert_array_equal(log.as_array(), rows_of([recorded[i] for i in order]))


def test_an_out_of_range_count_raises_and_is_not_recorded():
    log = StepLog()
    with pytest.raises(OverflowError):
        log.record(step(1, free_slots=2**31))
    with pytest.raises(OverflowError):
        log.record(step(1, replica=2**15))
    rows = rows_of([step(1), step(2, token_slots=2**31)])
    with pytest.raises(OverflowError, match="token_slots"):
        log.record_rows(rows, [1.0, 2.0])
    assert len(log) == 0
    log.record(step(1, free_slots=2**31 - 1))
    assert log.column("free_slots").tolist() == [2**31 - 1]


def test_record_rows_refuses_nan_and_truncates_a_fraction_like_record():
    log = StepLog()
    rows = rows_of([step(1)])
    rows[0, STEP_COLUMNS.index("queue_len")] = np.nan
    with pytest.raises(OverflowError, match="queue_len"):
        log.record_rows(rows, [1.0])
    assert len(log) == 0
    rows[0, STEP_COLUMNS.index("queue_len")] = 2.5
    log.record_rows(rows, [1.0])
    assert log.column("queue_len").tolist() == [2]


def test_columns_are_read_once_and_read_only():
    log = StepLog()
    log.record(step(1))
    columns = log.columns(("time_s", "used_blocks"))
    assert list(columns) == ["time_s", "used_blocks"]
    assert columns["used_blocks"] is columns["used_blocks"]
    with pytest.raises(ValueError):
        columns["used_blocks"][0] = 1
    with pytest.raises(KeyError):
        columns["queue_len"]
    with pytest.raises(KeyError):
        log.column("end_s")
