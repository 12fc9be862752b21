"""The step log: one row per engine step, in compact numpy storage, and its columns.
"""

from __future__ import annotations

import numpy as np

from sim.engine.sequences import LIMIT_NAMES

#: Columns of steps.csv, in file order (time first, then `StepLog.record`'s arguments).
STEP_COLUMNS = (
    "time_s",
    "replica",
    "duration_s",
    "batch_size",
    "num_prefill_tokens",
    "num_decode_tokens",
    "used_blocks",
    "cached_blocks",
    "free_blocks",
    "token_slots",
    "reserved_slots",
    "internal_frag_slots",
    "external_frag_slots",
    "free_slots",
    "swapped_blocks",
    "queue_len",
    "num_preempted",
    "limit",
)


_STEP_FLOAT_COLUMNS = frozenset({"time_s", "duration_s"})


#: Columns stored as codes and written by name: steps.csv's ``limit`` (sim.engine.sequences.Limit).
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

    def record(self, *row: float) -> None:
        """Append one step: one number per STEP_COLUMNS entry, in that order (``time_s``,
        the step's start in simulated seconds, first). Mutates the log; grows its storage
        geometrically when full."""
        i = self._size
        if i == self._data.shape[0]:
            self._grow()
        self._data[i] = row  # numpy rejects a row of the wrong length
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
