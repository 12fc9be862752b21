"""The calibrated cost model: step time as a non-negative sum of measured unit costs.

A step computes prefill chunks ``(s_i, n_i)`` (``s_i`` tokens already cached, ``n_i``
new) and decodes with contexts ``c_j`` (KV tokens attended to, the new one included),
after moving blocks. Its predicted time is::

    t = c_step      * 1                                  # any forward pass at all
      + c_dec_step  * (1 if D > 0 else 0)                 # the decode attention path runs
      + c_tokens    * T            T = sum n_i + D        # linear layers, embedding, norms
      + c_seqs      * S            S = chunks + D         # LM head, sampling, per-seq setup
      + c_chunks    * chunks                              # per-chunk attention launch
      + c_pf_cached * sum n_i s_i                         # query x cached-key pairs
      + c_pf_new    * sum n_i (n_i + 1) / 2               # causal pairs within the chunk
      + c_pf_ctx    * sum (s_i + n_i)                     # KV tokens a chunk reads
      + c_dec_ctx   * sum c_j                             # KV tokens decodes read
      + c_dec_pad   * D max_j c_j                         # batch padded to its longest
      + c_swap      * swapped blocks + c_copy * copied blocks

with ``D`` decodes. A batch with no tokens costs only its block moves. ``c_dec_step`` is
the fixed cost of the decode attention path (its launches in every layer), apart from
``c_step`` because a step that mixes prefill and decode runs both attention paths: without
it the fit under-predicted mixed steps of the tiny model on the CPU by 11 %. The two kinds of
prefill pairs get separate coefficients because kernels treat them differently: a
FlashAttention-style kernel skips masked tiles (cost ~ the causal half), the torch
fallback computes the whole ``n x (s + n)`` score matrix and masks it. The padded term
exists because the torch fallback gathers every decode's KV up to the batch's longest
context; Triton kernels stop at each sequence's own length, and the fit then drives
``c_dec_pad`` to zero. Every coefficient is a time per unit, so none may be negative:
a negative one would predict that more work takes less time, which only over-fits noise.

Fitting (:func:`fit`) is non-negative least squares on *relative* residuals (each row
divided by its measured time), so a 1 ms decode and a 100 ms prefill weigh the same
and the fit minimises roughly what MAPE measures. scipy is not a dependency, so
:func:`nnls` is a small Lawson-Hanson active-set solver (exact on consistent data,
a handful of iterations for twelve columns). Clipping an unconstrained ``lstsq`` solution
at zero would be simpler but wrong: the other coefficients keep the values that assumed
the clipped one was negative, and correlated columns (tokens, sequences, chunks) make
that common. The held-out error is measured on a
deterministic 80/20 split (every fifth row, in profile order); the shipped coefficients
are then refitted on all rows.

The JSON file (:func:`save` / :func:`load`)::

    {"format": "pagesim-calibration", "version": 1,
     "coefficients": {"step": 1.2e-3, "tokens": 3.1e-6, ...},   # seconds per unit
     "fit": {"rows": 91, "train_rows": 73, "heldout_rows": 18, "heldout_mape": 0.056,
             "heldout_p90_ape": 0.099, "all_rows_mape": 0.031, "all_rows_p90_ape": 0.064},
     "profile": {"model": "tiny", "model_shape": "L2-h64-...", "device": "cpu", ...}}
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from backend.step import Batch
from backend.transfer import NO_MOVES, MovedBlocks
from sim.catalog.links import DEVICE_MEMORY, HOST_LINK, blocks_per_link
from sim.inputs.textfile import parse_json, read_text
from sim.inputs.user_errors import UserError

FORMAT = "pagesim-calibration"


VERSION = 1


#: Feature names, in the order of :func:`step_features` (see the module docstring).
FEATURES = (
    "step",
    "decode_step",
    "tokens",
    "seqs",
    "prefill_chunks",
    "prefill_cached_pairs",
    "prefill_new_pairs",
    "prefill_context",
    "decode_context",
    "decode_padded",
    "swapped_blocks",
    "copied_blocks",
)


_N = len(FEATURES)


class CalibrationError(UserError, ValueError):
    """A calibration file or profile that cannot be used; the message is one line."""


def step_features(
    prefill_chunks: Sequence[tuple[int, int]],
    decode_context_lens: np.ndarray,
    moved: MovedBlocks = NO_MOVES,
) -> np.ndarray:
    """The feature vector (float64, ``len(FEATURES)``) of one step: prefill chunks
    ``(start, num_tokens)``, decode contexts (the new token included) and the blocks
    moved per route (the blocks on the host link and on device memory are the two move
    features).
    Pure; O(chunks) Python plus one numpy sum and max over the decodes. Raises
    ValueError for a route neither feature counts."""
    blocks = blocks_per_link(moved) if moved else None
    swapped, copied = (blocks[HOST_LINK], blocks[DEVICE_MEMORY]) if blocks else (0, 0)
    num_decodes = int(len(decode_context_lens))
    decode_sum = decode_max = 0
    if num_decodes:
        decode_sum = int(np.sum(decode_context_lens))
        decode_max = int(np.max(decode_context_lens))
    prefill_tokens = 0
    cached_pairs = 0
    new_pairs = 0
    context = 0
    for start, num_tokens in prefill_chunks:
        prefill_tokens += num_tokens
        cached_pairs += num_tokens * start
        new_pairs += num_tokens * (num_tokens + 1) // 2
        context += start + num_tokens
    chunks = len(prefill_chunks)
    active = 1.0 if chunks or num_decodes else 0.0
    return np.array(
        [
            active,
            1.0 if num_decodes else 0.0,
            prefill_tokens + num_decodes,
            chunks + num_decodes,
            chunks,
            cached_pairs,
            new_pairs,
            context,
            decode_sum,
            num_decodes * decode_max,
            swapped,
            copied,
        ],
        dtype=np.float64,
    )


def batch_features(batch: Batch, blocks_per_unit: float = 1.0) -> np.ndarray:
    """:func:`step_features` of an engine batch (its moves in blocks: ``blocks_per_unit``
    as :func:`backend.transfer.moved_blocks` takes it)."""
    return step_features(*batch.shape(blocks_per_unit))


def model_shape_key(spec: Any) -> str:
    """A compact, comparable name of a model's shape (any object with ModelSpec's
    attribute names), e.g. ``L2-h64-H4-kv2-d16-i128-v512``."""
    key = (
        f"L{spec.num_layers}-h{spec.hidden_size}-H{spec.num_heads}-kv{spec.num_kv_heads}"
        f"-d{spec.head_dim}-i{spec.intermediate_size}-v{spec.vocab_size}"
    )
    moe = getattr(spec, "moe", None)
    if moe:
        moe = moe if isinstance(moe, dict) else moe.model_dump()  # (a scenario.json's: a dict)
        key += f"-e{moe['num_experts']}k{moe['experts_per_token']}"
    return key


@dataclass(frozen=True)
class Calibration:
    """Fitted coefficients (seconds per unit of each feature), fit quality and where
    the profile came from (free-form metadata, written to the JSON as is)."""

    coefficients: dict[str, float]
    fit: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] = field(default_factory=dict)

    def vector(self) -> np.ndarray:
        return np.array([self.coefficients.get(name, 0.0) for name in FEATURES])

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Predicted seconds for feature rows ``[n, len(FEATURES)]`` (or one row)."""
        return np.asarray(features, dtype=np.float64) @ self.vector()


def save(calibration: Calibration, path: str | Path) -> Path:
    """Write the calibration JSON (module docstring); returns the path."""
    path = Path(path)
    document = {
        "format": FORMAT,
        "version": VERSION,
        "model": "step_s = sum(coefficients[f] * feature f); see sim/costs/calibrated.py",
        "coefficients": calibration.coefficients,
        "fit": calibration.fit,
        "profile": calibration.profile,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    return path


def load(path: str | Path) -> Calibration:
    """Read a calibration JSON. Raises CalibrationError (one line naming the file and
    the field) if it is unreadable, not UTF-8 or not JSON, of another format or
    version, lacks a coefficient or has one that is unknown, not a number, negative or
    not finite, or has a ``fit`` or ``profile`` that is not a mapping of JSON values
    (NaN and infinities excluded: validation.json repeats them)."""
    path = Path(path)
    try:
        document = parse_json(read_text(path, CalibrationError), finite=False)
    except json.JSONDecodeError as err:
        raise CalibrationError(f"{path}: line {err.lineno}: not valid JSON") from None
    except ValueError as err:
        if isinstance(err, CalibrationError):
            raise
        raise CalibrationError(f"{path}: not readable JSON: {err}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CalibrationError(f"{path}: not a pagesim calibration (format {FORMAT!r})")
    if document.get("version") != VERSION:
        raise CalibrationError(f"{path}: version {document.get('version')!r}, expected {VERSION}")
    coefficients = _coefficients(path, document.get("coefficients"))
    sections = {}
    for name in ("fit", "profile"):
        section = document.get(name) or {}
        if not isinstance(section, dict):
            raise CalibrationError(f"{path}: {name}: expected a mapping, got {section!r:.40}")
        try:
            _check_finite(path, name, section)
        except RecursionError:
            raise CalibrationError(f"{path}: {name}: nested too deeply") from None
        sections[name] = section
    shape = sections["profile"].get("model_shape")
    if shape is not None and not isinstance(shape, str):
        raise CalibrationError(f"{path}: profile.model_shape: expected a text, got {shape!r:.40}")
    return Calibration(coefficients, sections["fit"], sections["profile"])


def _coefficients(path: Path, coefficients: Any) -> dict[str, float]:
    """Every feature's coefficient, checked: a finite number >= 0 (not a bool)."""
    if not isinstance(coefficients, dict):
        raise CalibrationError(f"{path}: coefficients: expected a mapping of feature names")
    unknown = sorted(set(coefficients) - set(FEATURES))
    if unknown:
        raise CalibrationError(f"{path}: coefficients: unknown {unknown} (valid: {FEATURES})")
    for name, value in coefficients.items():
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value < 0:
            raise CalibrationError(
                f"{path}: coefficients.{name}: expected a finite number >= 0, got {value!r:.40}"
            )
    missing = [name for name in FEATURES if name not in coefficients]
    if missing:
        raise CalibrationError(
            f"{path}: coefficients.{missing[0]}: missing (a calibration has all of {FEATURES})"
        )
    return {name: float(coefficients[name]) for name in FEATURES}


def _check_finite(path: Path, where: str, value: Any) -> None:
    """No NaN or infinity anywhere in ``value`` (JSON that allow_nan=False can write)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise CalibrationError(f"{path}: {where}: expected a finite number, got {value!r}")
    if isinstance(value, dict | list):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            _check_finite(path, f"{where}.{key}", item)


class CalibratedCostModel:
    """The Executor seam over a :class:`Calibration`: ``execute(batch)`` predicts
    seconds. Immutable; ``execute`` mutates nothing and costs a few microseconds."""

    reads_token_ids = False  # a step's time depends on its shape, not on the tokens

    def __init__(self, calibration: Calibration, blocks_per_unit: float = 1.0):
        """``blocks_per_unit``: blocks one unit of a Transfer fills (1 for an allocator
        of blocks, 1 / block size for one of token-slot regions)."""
        self.calibration = calibration
        self._coefficients = calibration.vector()
        self.blocks_per_unit = blocks_per_unit

    def execute(self, batch: Batch) -> float:
        # np.sum, not `@`: BLAS's dot sums in a CPU- and thread-dependent order, and a
        # step time must have the same bits on every machine.
        features = batch_features(batch, self.blocks_per_unit)
        return float(np.sum(features * self._coefficients))

    def decode_steps(self, context_lens: np.ndarray, steps: int) -> np.ndarray:
        """Seconds of each step of a decode stretch, as ``execute`` gives them one by one
        (see :meth:`sim.costs.analytic.AnalyticCostModel.decode_steps`)."""
        return np.array([self.predict([], context_lens + i) for i in range(steps)])

    def predict(self, *shape, **moved) -> float:
        """Same arguments as :meth:`sim.costs.analytic.AnalyticCostModel.predict`."""
        return float(np.sum(step_features(*shape, **moved) * self._coefficients))


def shape_mismatch(calibration: Calibration, model_spec: Any) -> str:
    """Why ``calibration`` does not describe ``model_spec`` ('' if it does, or if the
    calibration does not say which shape it was profiled on)."""
    profiled = calibration.profile.get("model_shape")
    wanted = model_shape_key(model_spec)
    if profiled and profiled != wanted:
        return (
            f"profiled on a model of shape {profiled}, but the scenario's model is "
            f"{wanted}; profile this model"
        )
    return ""
