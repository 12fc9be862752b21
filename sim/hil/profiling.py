"""Profile the real backend over a grid of step shapes (``pagesim profile``).

Each shape is a step the engine could issue: decodes (how many, their contexts spread
evenly from ``decode_context_min`` to ``decode_context_max``), prefill chunks (how many,
tokens each, tokens already cached before each) or both at once. For every shape the
sequences get real block tables from a real :class:`~backend.blocks.BlockManager`, the
:class:`~backend.real.paged_executor.PagedExecutor` runs the step ``warmup`` times untimed and
``repeats`` times timed, and one CSV row records the shape with the minimum, the median
and the 10th and 90th percentiles of the measured seconds.

Calibration fits the minimum by default: on a shared machine other work only ever adds
time to a step, so the minimum of several runs is the most repeatable estimate of the
step's own cost (on the 2-core development machine, under load from other processes,
profile-to-profile variation was 11 % for the minimum and 17-22 % for the median).

Timing on a CPU runs torch with one intra-op thread by default (``cpu_threads``; the
executor sets it for each step and restores it after, and validation uses the same count):
on a small, shared machine a second thread makes every small op wait on a busy core;
measured on this project's 2-core machine with the tiny model, a decode step of 8
sequences took a median of 1.8 ms with one thread and 18 ms (p90 150 ms) with two.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from backend.step import Batch, PrefillChunk
from sim.costs.calibrated import model_shape_key, step_features
from sim.inputs.textfile import INT64_MAX, count, reading
from sim.run.progress import Progress

__all__ = [
    "CSV_COLUMNS",
    "StepShape",
    "default_grid",
    "profile",
    "read_profile",
    "write_profile",
]

SHAPE_COLUMNS = (
    "kind",
    "num_decodes",
    "decode_context_min",
    "decode_context_max",
    "num_chunks",
    "chunk_tokens",
    "chunk_start",
)
#: what a profile was measured on (the same in every row)
META_COLUMNS = (
    "device",
    "dtype",
    "model",
    "model_shape",
    "block_size",
    "torch_version",
    "triton_version",
)
CSV_COLUMNS = SHAPE_COLUMNS + ("min_s", "median_s", "p10_s", "p90_s", "repeats") + META_COLUMNS


@dataclass(frozen=True)
class StepShape:
    """One profiled step (module docstring). ``kind`` is decode, prefill or mixed."""

    num_decodes: int = 0
    decode_context_min: int = 0
    decode_context_max: int = 0
    num_chunks: int = 0
    chunk_tokens: int = 0
    chunk_start: int = 0

    @property
    def kind(self) -> str:
        if self.num_decodes and self.num_chunks:
            return "mixed"
        return "decode" if self.num_decodes else "prefill"

    def decode_contexts(self) -> np.ndarray:
        """Each decode's context (new token included), evenly spread, int64."""
        if not self.num_decodes:
            return np.zeros(0, dtype=np.int64)
        spread = np.linspace(self.decode_context_min, self.decode_context_max, self.num_decodes)
        return np.rint(spread).astype(np.int64)

    def chunks(self) -> list[tuple[int, int]]:
        """``(start, num_tokens)`` of each prefill chunk."""
        return [(self.chunk_start, self.chunk_tokens)] * self.num_chunks

    def features(self) -> np.ndarray:
        return step_features(self.chunks(), self.decode_contexts())

    def blocks_needed(self, block_size: int) -> int:
        lengths = [s + n for s, n in self.chunks()] + self.decode_contexts().tolist()
        return sum(-(-length // block_size) for length in lengths)


def _powers(low: int, high: int, factor: int) -> list[int]:
    values, value = [], low
    while value < high:
        values.append(value)
        value *= factor
    return values + [high]


def default_grid(
    *,
    max_num_seqs: int = 16,
    max_batched_tokens: int = 512,
    max_context: int = 1024,
    block_size: int = 16,
    quick: bool = False,
) -> list[StepShape]:
    """Shapes covering what an engine with these limits issues: decode batches (batch
    size x context, uniform and spread), prefill chunks (size x cached context, one or
    several per step) and mixed steps. ``quick`` keeps about a third of them.
    Raises ValueError for non-positive limits."""
    if min(max_num_seqs, max_batched_tokens, max_context, block_size) < 1:
        raise ValueError("grid limits must be positive")
    factor = 4 if quick else 2
    batch_sizes = _powers(1, max(1, min(max_num_seqs, max_batched_tokens)), factor)
    contexts = _powers(min(block_size, max_context), max_context, 4)
    # Prefill cost mixes terms in n and n^2 (and n x start): sizes every factor of 2 and
    # four starts keep those columns apart even in the quick grid.
    longest_chunk = min(max_batched_tokens, max_context)
    chunk_sizes = _powers(min(16, longest_chunk), longest_chunk, 2)
    starts = sorted({0, min(4 * block_size, max_context // 2), max_context // 4, max_context // 2})
    mixed_start = starts[1] if len(starts) > 1 else 0
    shapes = []
    for batch in batch_sizes:
        for context in contexts:
            shapes.append(StepShape(batch, context, context))
            if batch > 1 and context > contexts[0]:  # separates sum from padded context
                shapes.append(StepShape(batch, contexts[0], context))
    for tokens in chunk_sizes:
        for start in starts:
            if start + tokens <= max_context:
                shapes.append(StepShape(num_chunks=1, chunk_tokens=tokens, chunk_start=start))
        several = min(4, max_num_seqs, max_batched_tokens // tokens)
        if several > 1:
            shapes.append(StepShape(num_chunks=several, chunk_tokens=tokens))
    shortest, context = contexts[0], contexts[len(contexts) // 2]
    for batch in batch_sizes:  # mixed: decodes plus one or two chunks
        # Chunked prefill fills what the decodes leave of the token budget, so the
        # budget-filling chunk is the commonest mixed step of a busy engine.
        filling = min(max_batched_tokens - batch, max_context)
        for tokens in sorted({*chunk_sizes, filling} - {0}):
            for chunks, start in ((1, 0), (2, 0), (1, mixed_start)):
                fits = batch + chunks <= max_num_seqs and start + tokens <= max_context
                if fits and batch + chunks * tokens <= max_batched_tokens:
                    shapes.append(StepShape(batch, shortest, context, chunks, tokens, start))
    return list(dict.fromkeys(shapes))  # drop repeats (tiny limits collapse the ranges)


# --------------------------------------------------------------------------------------
# Running the grid
# --------------------------------------------------------------------------------------


def _versions() -> dict[str, str]:
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = ""
    return {"torch_version": torch.__version__, "triton_version": triton_version}


def _make_batch(shape: StepShape, allocator, rng: np.random.Generator, vocab: int) -> Batch:
    """Allocate the shape's sequences (ids 0..) and return its batch. Mutates
    ``allocator``; the caller frees the sequences."""
    seq_id = 0
    chunks = []
    for start, num_tokens in shape.chunks():
        prompt = rng.integers(0, vocab, start + num_tokens)
        allocator.allocate(seq_id, prompt)
        chunks.append(PrefillChunk(seq_id, start, prompt[start:]))
        seq_id += 1
    contexts = shape.decode_contexts()
    last_tokens = np.zeros(len(contexts), dtype=np.int32)
    for row, context in enumerate(contexts):
        tokens = rng.integers(0, vocab, int(context))
        allocator.allocate(seq_id + row, tokens)
        last_tokens[row] = tokens[-1]
    decode_ids = np.arange(seq_id, seq_id + len(contexts), dtype=np.int64)
    return Batch(tuple(chunks), decode_ids, contexts, last_tokens)


def _time(executor, batch: Batch, warmup: int, repeats: int) -> np.ndarray:
    for _ in range(warmup):
        executor.execute(batch)
    return np.array([executor.execute(batch) for _ in range(repeats)])


def profile(
    model_spec,
    shapes: Sequence[StepShape],
    *,
    block_size: int = 16,
    device: str = "cpu",
    dtype: str = "float32",
    warmup: int = 2,
    repeats: int = 5,
    seed: int = 0,
    cpu_threads: int = 1,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Run every shape on a real PagedExecutor (random weights from ``seed``; on a CPU
    with ``cpu_threads`` torch threads) and return one row per shape (keys
    :data:`CSV_COLUMNS`). The pool is sized for the largest shape. Raises ValueError for
    no shapes or fewer than one repeat."""
    from backend.blocks import BlockManager
    from backend.real.paged_executor import PagedExecutor

    if not shapes or repeats < 1 or warmup < 0:
        raise ValueError("profile needs at least one shape, repeats >= 1 and warmup >= 0")
    num_blocks = max(shape.blocks_needed(block_size) for shape in shapes)
    allocator = BlockManager(num_blocks, block_size)
    executor = PagedExecutor.from_spec(
        model_spec,
        allocator,
        device=device,
        dtype=dtype,
        seed=seed,
        cpu_threads=cpu_threads if device == "cpu" else None,
    )
    rng = np.random.default_rng(seed)
    common = {
        "device": device,
        "dtype": dtype,
        "model": getattr(model_spec, "name", ""),
        "model_shape": model_shape_key(model_spec),
        "block_size": block_size,
        **_versions(),
    }
    bar = Progress(len(shapes), "profiling", enabled=progress)
    rows = []
    for done, (shape, seconds) in enumerate(
        _measure_all(executor, allocator, shapes, rng, warmup, repeats), start=1
    ):
        p10, median, p90 = np.percentile(seconds, [10, 50, 90])
        rows.append(
            {
                "kind": shape.kind,
                **asdict(shape),
                "min_s": float(seconds.min()),
                "median_s": float(median),
                "p10_s": float(p10),
                "p90_s": float(p90),
                "repeats": repeats,
                **common,
            }
        )
        bar.update(done)
    bar.close()
    return rows


def _measure_all(executor, allocator, shapes, rng, warmup, repeats) -> Iterator:
    vocab = executor.shape.vocab_size
    for shape in shapes:
        batch = _make_batch(shape, allocator, rng, vocab)
        try:
            yield shape, _time(executor, batch, warmup, repeats)
        finally:
            for chunk in batch.prefills:
                allocator.free(chunk.seq_id)
            for seq_id in batch.decode_seq_ids:
                allocator.free(int(seq_id))


# --------------------------------------------------------------------------------------
# The CSV
# --------------------------------------------------------------------------------------


def write_profile(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write profile rows as CSV (columns :data:`CSV_COLUMNS`, floats to 9 significant
    digits); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: f"{v:.9g}" if isinstance(v, float) else v for k, v in row.items()})
    return path


def read_profile(
    path: str | Path, statistic: str = "min_s"
) -> tuple[list[StepShape], np.ndarray, dict[str, str]]:
    """Shapes, seconds (the ``statistic`` column: ``min_s``, ``median_s``, ``p10_s``...)
    and the run's metadata (device, model, versions...) of a profile CSV. Raises
    ValueError (one line naming the file, and the line and column of a bad value) for
    an unreadable file, one that is not UTF-8 or not CSV, a missing column, a shape
    column that is not a non-negative int64 or a time that is not a positive finite
    number of seconds."""
    path = Path(path)
    shapes, seconds, records = [], [], []
    with reading(path, ValueError), path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        try:
            present = set(reader.fieldnames or [])
            missing = [c for c in (statistic, *SHAPE_COLUMNS[1:]) if c not in present]
            if missing:
                raise ValueError(f"{path}: not a pagesim profile: missing columns {missing}")
            for record in reader:
                shapes.append(_shape(path, reader.line_num, record))
                seconds.append(_seconds(path, reader.line_num, record, statistic))
                records.append(record)
        except csv.Error as err:
            raise ValueError(f"{path}: line {reader.line_num + 1}: not CSV: {err}") from None
    meta = {k: records[0].get(k) or "" for k in META_COLUMNS} if records else {}
    meta["statistic"] = statistic
    return shapes, np.array(seconds, dtype=np.float64), meta


def _shape(path: Path, line: int, record: dict) -> StepShape:
    values = {}
    for column in SHAPE_COLUMNS[1:]:
        values[column] = count(record.get(column))
        if values[column] is None:
            raise ValueError(
                f"{path}: line {line}: {column}: expected a non-negative integer of at most "
                f"{INT64_MAX}, got {str(record.get(column))[:40]!r}"
            )
    return StepShape(**values)


def _seconds(path: Path, line: int, record: dict, statistic: str) -> float:
    text = record.get(statistic)
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(
            f"{path}: line {line}: {statistic}: expected a positive finite number of "
            f"seconds, got {str(text)[:40]!r}"
        )
    return value
