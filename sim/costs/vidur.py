"""Reading Vidur's published GPU profiles: per-operator median times on measured grids.

Vidur (microsoft/vidur) profiles one model on one device and writes, under
``data/profiling``:

* ``compute/<device>/<model>/mlp.csv``: one row per (token count, tensor-parallel
  degree) with ``time_stats.<op>.median`` in milliseconds for the embedding and each
  per-layer operator (``input_layernorm``, ``attn_pre_proj``, ``attn_rope``,
  ``attn_post_proj``, ``post_attention_layernorm``, ``mlp_up_proj``, ``mlp_act``,
  ``mlp_down_proj``, ``add``), and the model shape (``n_head``, ``n_kv_head``,
  ``n_embd``, ``n_expanded_embd``, ``use_gated_mlp``).
* ``compute/<device>/<model>/attention.csv``: prefill rows (one prompt chunk of
  ``prefill_chunk_size`` tokens after ``kv_cache_size`` cached ones) with
  ``time_stats.attn_prefill.median``, decode rows (``batch_size`` sequences each reading
  ``kv_cache_size`` tokens) with ``time_stats.attn_decode.median``, and
  ``time_stats.attn_kv_cache_save.median`` (plus input/output reshapes) for both.
* ``network/<node>/all_reduce.csv``: ``time_stats.all_reduce.median`` over message
  ``size`` in bytes, for ``num_workers`` GPUs ``devices_per_node`` to a node.
* ``cpu_overhead/<node>/<model>/cpu_overheads.csv``: per ``batch_size`` and
  ``tensor_parallel_degree``, the medians of schedule, sampler, prepare-inputs and
  process-outputs time (``<name>_median``, upper or lower case) in milliseconds.

:func:`load_vidur_profile` reads the rows that match a model's shape and tensor-parallel
degree into lookup tables that interpolate linearly inside the measured grid and answer
``None`` outside it (the caller falls back to the analytic model there). Only the compute
file is required; the others are used when present.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sim.catalog.hardware import ModelSpec
from sim.costs.analytic import LAYER_OPS
from sim.inputs.user_errors import UserError

__all__ = [
    "DENSE_OPS",
    "Grid2D",
    "ProfileError",
    "Table1D",
    "VidurProfile",
    "load_vidur_profile",
]

#: Per-layer operators of mlp.csv (the embedding is once per step): the analytic model's
#: layer operators, which carry Vidur's names, but the KV save (attention.csv) and the
#: all-reduce (all_reduce.csv).
DENSE_OPS = tuple(op for op in LAYER_OPS if op not in ("kv_cache_save", "all_reduce"))
_OPTIONAL_DENSE = frozenset({"post_attention_layernorm", "add"})  # Vidur fills them with 0
_RESHAPES = ("attn_input_reshape", "attn_output_reshape")
_CPU_PARTS = ("schedule", "sampler_e2e", "prepare_inputs_e2e", "process_model_outputs")
_MS = 1e-3


class ProfileError(UserError, ValueError):
    """A profile that cannot be used; the message is one line naming the file."""


@dataclass(frozen=True)
class Table1D:
    """Linear interpolation of y over sorted x; ``None`` outside ``[x[0], x[-1]]``."""

    x: np.ndarray
    y: np.ndarray

    @classmethod
    def from_points(cls, points: Iterable[tuple[float, float]]) -> Table1D | None:
        """Median of y per distinct x; None for no point."""
        by_x: dict[float, list[float]] = defaultdict(list)
        for x, y in points:
            if math.isfinite(x) and math.isfinite(y):
                by_x[x].append(y)
        if not by_x:
            return None
        xs = sorted(by_x)
        return cls(np.array(xs), np.array([float(np.median(by_x[x])) for x in xs]))

    def __call__(self, x: float) -> float | None:
        if x < self.x[0] or x > self.x[-1]:
            return None
        return float(np.interp(x, self.x, self.y))


@dataclass(frozen=True)
class Grid2D:
    """Bilinear interpolation over a rectilinear grid of measured ``(x, y)`` points;
    ``None`` where a surrounding corner was not measured or outside the grid."""

    xs: np.ndarray
    ys: np.ndarray
    values: Mapping[tuple[float, float], float]

    @classmethod
    def from_points(cls, points: Iterable[tuple[float, float, float]]) -> Grid2D | None:
        by_xy: dict[tuple[float, float], list[float]] = defaultdict(list)
        for x, y, v in points:
            if math.isfinite(x) and math.isfinite(y) and math.isfinite(v):
                by_xy[(x, y)].append(v)
        if not by_xy:
            return None
        values = {key: float(np.median(vs)) for key, vs in by_xy.items()}
        xs = np.array(sorted({x for x, _ in values}))
        ys = np.array(sorted({y for _, y in values}))
        return cls(xs, ys, values)

    def __call__(self, x: float, y: float) -> float | None:
        bracket_x, bracket_y = _bracket(self.xs, x), _bracket(self.ys, y)
        if bracket_x is None or bracket_y is None:
            return None
        (x0, x1, wx), (y0, y1, wy) = bracket_x, bracket_y
        corners = [self.values.get(key) for key in ((x0, y0), (x1, y0), (x0, y1), (x1, y1))]
        if any(c is None for c in corners):
            return None
        c00, c10, c01, c11 = corners
        return (1 - wx) * ((1 - wy) * c00 + wy * c01) + wx * ((1 - wy) * c10 + wy * c11)


def _bracket(axis: np.ndarray, value: float) -> tuple[float, float, float] | None:
    """(low, high, weight of high) around ``value`` on ``axis``; None outside it."""
    if value < axis[0] or value > axis[-1]:
        return None
    i = int(np.searchsorted(axis, value))
    if axis[i] == value:
        return float(axis[i]), float(axis[i]), 0.0
    low, high = float(axis[i - 1]), float(axis[i])
    return low, high, (value - low) / (high - low)


@dataclass
class VidurProfile:
    """One model's measured operator times on one device (seconds), per layer."""

    source: str
    dense: dict[str, Table1D]
    embedding: Table1D | None = None
    prefill_attention: Grid2D | None = None  # (cached tokens, chunk tokens)
    decode_attention: Grid2D | None = None  # (batch size, context tokens)
    prefill_kv_save: Table1D | None = None  # chunk tokens
    decode_kv_save: Table1D | None = None  # batch size
    all_reduce: Table1D | None = None  # message bytes
    cpu_overhead: Table1D | None = None  # batch size
    files: list[str] = field(default_factory=list)

    @property
    def max_tokens(self) -> float:
        return float(min(table.x[-1] for table in self.dense.values()))


def load_vidur_profile(
    root: str | Path,
    *,
    model: ModelSpec,
    tensor_parallel: int,
    device: str,
    model_name: str,
    network: str | None = None,
    block_size: int = 16,
) -> VidurProfile:
    """The profile of ``model_name`` on ``device`` under ``root`` (Vidur's
    ``data/profiling`` folder, or directly the folder holding ``mlp.csv``), for
    ``model``'s shape at ``tensor_parallel``. Raises ProfileError (one line)."""
    root = Path(root)
    compute = root if (root / "mlp.csv").is_file() else root / "compute" / device / model_name
    mlp_path = compute / "mlp.csv"
    if not mlp_path.is_file():
        raise ProfileError(f"{mlp_path}: not found (Vidur's compute/<device>/<model>/mlp.csv)")
    profile = VidurProfile(source=str(root), dense={})
    _read_dense(profile, mlp_path, model, tensor_parallel)
    attention_path = compute / "attention.csv"
    if attention_path.is_file():
        _read_attention(profile, attention_path, model, tensor_parallel, block_size)
    if network and tensor_parallel > 1:
        path = root / "network" / network / "all_reduce.csv"
        if path.is_file():
            _read_all_reduce(profile, path, tensor_parallel)
    if network:
        path = root / "cpu_overhead" / network / model_name / "cpu_overheads.csv"
        if path.is_file():
            _read_cpu_overhead(profile, path, model_name, tensor_parallel)
    return profile


# ------------------------------------------------------------------------------ files


def _rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(line for line in f if not line.startswith("#"))
            rows = list(reader)
            return list(reader.fieldnames or []), rows
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise ProfileError(f"{path}: cannot read: {err}") from None


def _number(row: Mapping[str, str], column: str) -> float:
    text = (row.get(column) or "").strip()
    if text in ("True", "False"):
        return float(text == "True")
    try:
        return float(text) if text else math.nan
    except ValueError:
        return math.nan


def _require(path: Path, columns: Sequence[str], needed: Iterable[str]) -> None:
    missing = [c for c in needed if c not in columns]
    if missing:
        raise ProfileError(f"{path}: missing column {missing[0]!r} (not Vidur's layout?)")


def _matching(rows, path: Path, criteria: Mapping[str, float], what: str) -> list:
    chosen = [r for r in rows if all(_number(r, c) == v for c, v in criteria.items())]
    if not chosen:
        wanted = ", ".join(f"{c}={v:g}" for c, v in criteria.items())
        raise ProfileError(f"{path}: no {what} rows for {wanted}")
    return chosen


def _read_dense(profile: VidurProfile, path: Path, model: ModelSpec, tp: int) -> None:
    columns, rows = _rows(path)
    shape = {
        "n_head": model.num_heads,
        "n_kv_head": model.num_kv_heads,
        "n_embd": model.hidden_size,
        "n_expanded_embd": model.intermediate_size,
        "num_tensor_parallel_workers": tp,
    }
    _require(path, columns, [*shape, "num_tokens"])
    rows = _matching(rows, path, shape, "model-shape")
    for op in DENSE_OPS:
        column = f"time_stats.{op}.median"
        if column not in columns:
            if op in _OPTIONAL_DENSE:
                continue
            raise ProfileError(f"{path}: missing column {column!r}")
        table = Table1D.from_points(
            (_number(r, "num_tokens"), _number(r, column) * _MS) for r in rows
        )
        if table is not None:
            profile.dense[op] = table
    if "time_stats.emb.median" in columns:
        profile.embedding = Table1D.from_points(
            (_number(r, "num_tokens"), _number(r, "time_stats.emb.median") * _MS) for r in rows
        )
    profile.files.append(str(path))


def _read_attention(
    profile: VidurProfile, path: Path, model: ModelSpec, tp: int, block_size: int
) -> None:
    columns, rows = _rows(path)
    shape = {
        "n_embd": model.hidden_size,
        "n_q_head": model.num_heads,
        "n_kv_head": model.num_kv_heads,
        "num_tensor_parallel_workers": tp,
    }
    _require(path, columns, [*shape, "batch_size", "prefill_chunk_size", "kv_cache_size"])
    rows = [r for r in rows if all(_number(r, c) == v for c, v in shape.items())]
    if not rows:
        return  # attention not profiled for this shape or tp: the analytic model covers it
    exact = [r for r in rows if _number(r, "block_size") == block_size]
    rows = exact or rows  # another block size is the nearest thing measured

    def extra(row) -> float:  # the input/output reshapes Vidur times around attention
        total = sum(_finite(_number(row, f"time_stats.{op}.median")) for op in _RESHAPES)
        return total * _MS

    prefill = [r for r in rows if _number(r, "prefill_chunk_size") > 0]
    decode = [r for r in rows if _number(r, "prefill_chunk_size") == 0]
    save = "time_stats.attn_kv_cache_save.median"
    profile.prefill_attention = Grid2D.from_points(
        (
            _number(r, "kv_cache_size"),
            _number(r, "prefill_chunk_size"),
            _number(r, "time_stats.attn_prefill.median") * _MS + extra(r),
        )
        for r in prefill
    )
    profile.decode_attention = Grid2D.from_points(
        (
            _number(r, "batch_size"),
            _number(r, "kv_cache_size"),
            _number(r, "time_stats.attn_decode.median") * _MS + extra(r),
        )
        for r in decode
    )
    if save in columns:
        profile.prefill_kv_save = Table1D.from_points(
            (_number(r, "prefill_chunk_size"), _number(r, save) * _MS)
            for r in prefill
            if _number(r, "kv_cache_size") == 0
        )
        profile.decode_kv_save = Table1D.from_points(
            (_number(r, "batch_size"), _number(r, save) * _MS) for r in decode
        )
    profile.files.append(str(path))


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def _read_all_reduce(profile: VidurProfile, path: Path, tp: int) -> None:
    columns, rows = _rows(path)
    _require(path, columns, ["num_workers", "size", "time_stats.all_reduce.median"])
    rows = [r for r in rows if _number(r, "num_workers") == tp]
    if "devices_per_node" in columns:
        rows = [r for r in rows if _number(r, "devices_per_node") == tp]
    profile.all_reduce = Table1D.from_points(
        (_number(r, "size"), _number(r, "time_stats.all_reduce.median") * _MS) for r in rows
    )
    if profile.all_reduce is not None:
        profile.files.append(str(path))


def _read_cpu_overhead(profile: VidurProfile, path: Path, model_name: str, tp: int) -> None:
    columns, rows = _rows(path)
    lower = {c.lower(): c for c in columns}
    parts = [lower.get(f"{part}_median") for part in _CPU_PARTS]
    if None in parts or "batch_size" not in lower:
        raise ProfileError(f"{path}: missing a *_median or batch_size column")
    if "model_name" in lower:
        rows = [r for r in rows if r[lower["model_name"]] == model_name]
    if "tensor_parallel_degree" in lower:
        rows = [r for r in rows if _number(r, lower["tensor_parallel_degree"]) == tp]
    profile.cpu_overhead = Table1D.from_points(
        (_number(r, lower["batch_size"]), sum(_number(r, p) for p in parts) * _MS) for r in rows
    )
    if profile.cpu_overhead is not None:
        profile.files.append(str(path))
