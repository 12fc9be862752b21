"""The step log: one row per engine step, in compact numpy storage, and its columns."""

from __future__ import annotations

import numpy as np

from sim.engine.records import LIMIT_NAMES, STEP_FIELDS, StepRecord

#: Columns of steps.csv, in file order: the fields of the engine's StepRecord.
STEP_COLUMNS = STEP_FIELDS


_STEP_FLOAT_COLUMNS = frozenset({"time_s", "duration_s"})


#: Columns stored as codes and written by name: steps.csv's ``limit`` (sim.engine.records.Limit).
_STEP_NAMED_COLUMNS = {"limit": LIMIT_NAMES}


_STEP_INDEX = {name: i for i, name in enumerate(STEP_COLUMNS)}


#: The per-step split of one replica's token slots, and its names in summary["kv"].
KV_SPLIT_COLUMNS = (
    "token_slots",
    "reserved_slots",
    "internal_frag_slots",
    "external_frag_slots",
    "free_slots",
)


KV_SPLIT_KEYS = ("token_states", "reserved", "internal_frag", "external_frag", "free")


class StepLog:
    """Append-only log of simulator steps, one row per `record` call.

    Rows live in one preallocated float64 matrix that doubles when full, so a record is
    one row assignment (well under a microsecond) and no Python object per step is kept.
    Integer-valued columns are exact in float64 up to 2**53."""

    def __init__(self, initial_capacity: int = 4096) -> None:
        self._data = np.zeros((max(1, int(initial_capacity)), len(STEP_COLUMNS)))
        # When each step ended (the SimPy time of its completion): rows are read in this
        # order. Replicas stepping one event at a time record in it already; a decode
        # stretch records its steps together, after other replicas' later steps.
        self._ends = np.zeros(self._data.shape[0])
        self._size = 0
        self._order: bool | None = None  # True once the rows are in reading order

    def record(self, step: StepRecord, end_s: float | None = None) -> None:
        """Append one step that ended at ``end_s`` (default: its start plus its
        duration). Mutates the log; grows its storage geometrically when full."""
        i = self._size
        if i == self._data.shape[0]:
            self._grow(i + 1)
        self._data[i] = step  # a StepRecord is a tuple in STEP_COLUMNS order
        self._ends[i] = step[0] + step[2] if end_s is None else end_s
        self._size = i + 1
        self._order = None

    def record_rows(self, rows: np.ndarray, ends: np.ndarray) -> None:
        """Append several steps at once: ``rows`` in STEP_COLUMNS order, one per step,
        which ended at ``ends``."""
        start, count = self._size, rows.shape[0]
        if start + count > self._data.shape[0]:
            self._grow(start + count)
        self._data[start : start + count] = rows
        self._ends[start : start + count] = ends
        self._size = start + count
        self._order = None

    def _grow(self, needed: int) -> None:
        capacity = max(2 * self._data.shape[0], needed)
        bigger = np.zeros((capacity, self._data.shape[1]))
        bigger[: self._size] = self._data[: self._size]
        ends = np.zeros(capacity)
        ends[: self._size] = self._ends[: self._size]
        self._data, self._ends = bigger, ends

    def _rows(self) -> np.ndarray:
        """The recorded rows in the order their steps ended (ties: as recorded); put in
        that order in place, once, when a stretch recorded out of it."""
        size = self._size
        if self._order is None:
            ends = self._ends[:size]
            if size > 1 and not bool((ends[1:] >= ends[:-1]).all()):
                order = np.argsort(ends, kind="stable")
                self._data[:size] = self._data[:size][order]
                self._ends[:size] = ends[order]
            self._order = True
        return self._data[:size]

    def __len__(self) -> int:
        return self._size

    @property
    def capacity(self) -> int:
        """Rows that fit before the next growth."""
        return int(self._data.shape[0])

    def as_array(self) -> np.ndarray:
        """Read-only view of the recorded rows, shape (len, len(STEP_COLUMNS))."""
        view = self._rows()
        view.flags.writeable = False
        return view

    def column(self, name: str) -> np.ndarray:
        """Read-only view of one column (a name from STEP_COLUMNS; KeyError otherwise)."""
        view = self._rows()[:, _STEP_INDEX[name]]
        view.flags.writeable = False
        return view
