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
        self._size = 0

    def record(self, step: StepRecord) -> None:
        """Append one step. Mutates the log; grows its storage geometrically when full."""
        i = self._size
        if i == self._data.shape[0]:
            self._grow()
        self._data[i] = step  # a StepRecord is a tuple in STEP_COLUMNS order
        self._size = i + 1

    def _grow(self) -> None:
        bigger = np.zeros((2 * self._data.shape[0], self._data.shape[1]))
        bigger[: self._size] = self._data[: self._size]
        self._data = bigger

    def __len__(self) -> int:
        return self._size

    @property
    def capacity(self) -> int:
        """Rows that fit before the next growth."""
        return int(self._data.shape[0])

    def as_array(self) -> np.ndarray:
        """Read-only view of the recorded rows, shape (len, len(STEP_COLUMNS))."""
        view = self._data[: self._size]
        view.flags.writeable = False
        return view

    def column(self, name: str) -> np.ndarray:
        """Read-only view of one column (a name from STEP_COLUMNS; KeyError otherwise)."""
        view = self._data[: self._size, _STEP_INDEX[name]]
        view.flags.writeable = False
        return view
