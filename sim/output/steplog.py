"""The step log: one row per engine step, in compact typed chunks, and its columns."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

import numpy as np

from sim.engine.records import LIMIT_NAMES, STEP_FIELDS, StepRecord

#: Columns of steps.csv, in file order: the fields of the engine's StepRecord.
STEP_COLUMNS = STEP_FIELDS


_STEP_FLOAT_COLUMNS = frozenset({"time_s", "duration_s"})


#: Columns stored as codes and written by name: steps.csv's ``limit`` (sim.engine.records.Limit).
_STEP_NAMED_COLUMNS = {"limit": LIMIT_NAMES}


_STEP_INDEX = {name: i for i, name in enumerate(STEP_COLUMNS)}


#: How each column is stored (and read back): float64 for times; int8 for the limit code
#: (sim.engine.records.Limit, 0..4); int16 for the replica index; int32 for every count.
#: A value outside its type's range raises OverflowError when recorded (int32 holds the
#: slots of a pool of 2**31 - 1 tokens, e.g. 134M blocks of 16), never wraps.
STEP_DTYPES: Mapping[str, np.dtype] = {
    name: np.dtype(
        np.float64
        if name in _STEP_FLOAT_COLUMNS
        else {"limit": np.int8, "replica": np.int16}.get(name, np.int32)
    )
    for name in STEP_COLUMNS
}


#: One stored row: the StepRecord fields, then when the step ended. Packed (83 bytes).
_ROW = np.dtype([*STEP_DTYPES.items(), ("end_s", np.float64)])


#: Rows of each chunk once the log has grown (5.4 MB a chunk at 83 bytes a row).
CHUNK_ROWS = 65_536


_INT_COLUMNS = [name for name in STEP_COLUMNS if STEP_DTYPES[name].kind == "i"]
_INT_POSITIONS = np.array([_STEP_INDEX[name] for name in _INT_COLUMNS])
_INT_LOW = np.array([np.iinfo(STEP_DTYPES[name]).min for name in _INT_COLUMNS], dtype=float)
_INT_HIGH = np.array([np.iinfo(STEP_DTYPES[name]).max for name in _INT_COLUMNS], dtype=float)


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
    """Append-only log of simulator steps, one row per `record` call, read by column.

    Rows live in chunks of a packed record type (STEP_DTYPES, 83 bytes a row): the first
    holds ``initial_capacity`` rows, each next one twice as many up to ``chunk_rows``,
    then every chunk holds ``chunk_rows``. Growing adds a chunk and copies nothing, so a
    record is one tuple assignment and no Python object per step is kept."""

    def __init__(self, initial_capacity: int = 4096, chunk_rows: int = CHUNK_ROWS) -> None:
        self._chunk_rows = max(1, int(chunk_rows))
        self._full: list[np.ndarray] = []  # chunks filled up, in order
        self._filled = 0  # rows in them
        self._tail = np.zeros(min(max(1, int(initial_capacity)), self._chunk_rows), _ROW)
        self._used = 0  # rows of the tail chunk recorded
        # Rows are read in the order their steps ended (the SimPy time of completion).
        # Replicas stepping one event at a time record in it already; a decode stretch
        # records its steps together, after other replicas' later steps. The first
        # ``_sorted`` rows are known to be in that order.
        self._sorted = 0

    def record(self, step: StepRecord, end_s: float | None = None) -> None:
        """Append one step that ended at ``end_s`` (default: its start plus its
        duration). Mutates the log; adds a chunk when the last is full. Raises
        OverflowError for a count out of its column's range (STEP_DTYPES); a float
        in an integer field is truncated, as int() does."""
        i = self._used
        if i == self._tail.shape[0]:
            self._add_chunk()
            i = 0
        # A StepRecord is a tuple in STEP_COLUMNS order: one C-level row assignment.
        self._tail[i] = step + (step[0] + step[2] if end_s is None else end_s,)
        self._used = i + 1

    def record_rows(self, rows: np.ndarray, ends: np.ndarray) -> None:
        """Append several steps at once: ``rows`` (float, shape (count, len(STEP_COLUMNS)))
        in STEP_COLUMNS order, one per step, which ended at ``ends``. Raises OverflowError
        if an integer column holds a value out of its type's range (or NaN), before
        recording anything; a float in an integer column is truncated, as in ``record``."""
        rows, ends = np.asarray(rows, dtype=float), np.asarray(ends, dtype=float)
        _check_counts(rows)
        done, count = 0, rows.shape[0]
        while done < count:
            if self._used == self._tail.shape[0]:
                self._add_chunk()
            take = min(count - done, self._tail.shape[0] - self._used)
            part = self._tail[self._used : self._used + take]
            for j, name in enumerate(STEP_COLUMNS):
                part[name] = rows[done : done + take, j]
            part["end_s"] = ends[done : done + take]
            self._used += take
            done += take

    def _add_chunk(self) -> None:
        self._full.append(self._tail)
        self._filled += self._tail.shape[0]
        self._tail = np.zeros(min(2 * self._tail.shape[0], self._chunk_rows), _ROW)
        self._used = 0

    def __len__(self) -> int:
        return self._filled + self._used

    @property
    def capacity(self) -> int:
        """Rows that fit before the next chunk is added."""
        return self._filled + int(self._tail.shape[0])

    def column(self, name: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """One column (a name from STEP_COLUMNS; KeyError otherwise) of rows
        ``start:stop`` (default: all), in reading order, typed as STEP_DTYPES says: a
        read-only copy made at each call. May put the rows in order first, in place."""
        if name not in STEP_DTYPES:
            raise KeyError(name)
        self._sort()
        values = self._read(name, start, len(self) if stop is None else stop)
        values.flags.writeable = False
        return values

    def columns(self, names: Iterable[str] = STEP_COLUMNS) -> StepColumns:
        """``names`` as a mapping of columns, each read on first use and kept by the
        mapping (not by the log): drop it to free them."""
        return StepColumns(self, names)

    def as_array(self) -> np.ndarray:
        """Every column as float64, shape (len, len(STEP_COLUMNS)), read-only. A full
        copy of 144 bytes a row: for tests and small logs; readers use `column`."""
        rows = np.empty((len(self), len(STEP_COLUMNS)))
        for j, name in enumerate(STEP_COLUMNS):
            rows[:, j] = self.column(name)
        rows.flags.writeable = False
        return rows

    def _spans(self, start: int, stop: int) -> Iterator[tuple[np.ndarray, int, int]]:
        """(chunk, first, end) of each chunk part holding rows ``start:stop``."""
        base = 0
        for chunk in (*self._full, self._tail[: self._used]):
            first, end = max(start - base, 0), min(stop - base, chunk.shape[0])
            if first < end:
                yield chunk, first, end
            base += chunk.shape[0]

    def _read(self, name: str, start: int, stop: int) -> np.ndarray:
        parts = [chunk[name][first:end] for chunk, first, end in self._spans(start, stop)]
        return np.concatenate(parts) if parts else np.zeros(0, _ROW[name])

    def _sort(self) -> None:
        """Put the rows in the order their steps ended (ties: as recorded), in place,
        one column at a time (so only one column's copy is alive at once)."""
        size = len(self)
        if self._sorted == size:
            return
        # the rows since the last sort, and one before: the whole column only to reorder
        fresh = self._read("end_s", max(self._sorted - 1, 0), size)
        if not bool((fresh[1:] >= fresh[:-1]).all()):
            order = np.argsort(self._read("end_s", 0, size), kind="stable")
            for name in _ROW.names:
                values = self._read(name, 0, size)[order]
                for chunk, first, end in self._spans(0, size):
                    chunk[name][first:end], values = values[: end - first], values[end - first :]
        self._sorted = size


class StepColumns(Mapping):
    """Columns of a step log by name (read-only arrays, STEP_DTYPES), each read from the
    log when first asked for and then kept here."""

    def __init__(self, log: StepLog, names: Iterable[str]) -> None:
        self._log, self._names = log, tuple(names)
        self._read: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._names:
            raise KeyError(name)
        if name not in self._read:
            self._read[name] = self._log.column(name)
        return self._read[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _check_counts(rows: np.ndarray) -> None:
    """Raise OverflowError unless every count fits its column (NaN does not); a float is
    truncated when stored, as ``record`` does. One pass: this runs once per stretch."""
    counts = rows[:, _INT_POSITIONS]
    fits = (counts >= _INT_LOW) & (counts <= _INT_HIGH)
    if not fits.all():
        bad = np.flatnonzero(~fits.all(axis=0))[0]
        raise OverflowError(f"step column {_INT_COLUMNS[bad]!r} out of range for its type")
