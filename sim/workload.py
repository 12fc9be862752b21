"""The request stream: arrivals, lengths, shared prefixes, sessions, token ids.

:class:`WorkloadSpec` (pydantic, a section of the scenario) describes the traffic;
:func:`generate_requests` turns it into a list of :class:`sim.types.Request` sorted by
arrival time with ``req_id`` = index.

Token ids are synthesised so that the prefix cache sees exactly the sharing the workload
describes and nothing else:

* a request's own tokens are uniform random ids in ``[0, vocab)`` drawn from the run's
  generator, so two requests share a full block by accident with probability
  ``vocab ** -block_size`` (nil);
* a prefix group's system prompt is drawn once and copied into every request of the group;
* a session turn's prompt is the previous turn's prompt, then the previous turn's output
  tokens, then new user tokens;
* a Mooncake ``hash_id`` stands for one 512-token block whose tokens are a pure function
  of (seed, hash id), so equal hash ids give equal tokens in any request.

Output tokens are a pure function :func:`output_token_ids` of (seed, stream, position):
the engine calls it to synthesise what each sequence decodes, and the generator calls it
to build the next session turn, so both agree token for token. The seed is
``scenario.simulation.seed`` (``token_seed`` of :func:`generate_requests`).

Simplification: a session's next turn arrives ``think time`` after the previous turn's
*arrival*, not after its completion; the engine does not feed completion times back into
the workload (the stream is generated once, up front).

Clipping: every request has at least one prompt token and one output token and
``prompt + output <= model.max_model_len``. Own tokens are cut first, then the output.
A session ends early when its history alone leaves no room for another turn.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, NamedTuple, Protocol

import numpy as np
from pydantic import (
    BeforeValidator,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from sim.schema import StrictModel
from sim.tokens import (  # noqa: F401  (re-exported: the workload's public face)
    MOONCAKE_BLOCK_TOKENS,
    STREAM_STRIDE,
    SyntheticOutputs,
    hash_block_tokens,
    output_stream_states,
    output_token_ids,
    output_tokens_at,
    stream_id,
)
from sim.traces import Trace, TraceError, load_trace  # noqa: F401
from sim.types import Request

__all__ = [
    "LENGTH_PRESETS",
    "MOONCAKE_BLOCK_TOKENS",
    "STREAM_STRIDE",
    "LengthTableError",
    "StrictModel",
    "TraceError",
    "WorkloadSpec",
    "generate_requests",
    "load_length_table",
    "load_trace",
    "output_token_ids",
    "stream_id",
]


# --------------------------------------------------------------------------------------
# Strict pydantic base: misspelt fields fail with a suggestion
# --------------------------------------------------------------------------------------


def _base_dir(info: ValidationInfo) -> Path:
    """Relative paths resolve against the scenario file's directory (passed by the loader
    as validation context), else against the working directory."""
    context = info.context or {}
    return Path(context.get("base_dir", "."))


def resolve_existing_file(value: str, info: ValidationInfo) -> Path:
    """The absolute path of an existing file named in a scenario; ValueError if none."""
    resolved = (_base_dir(info) / value).resolve()
    if not resolved.is_file():
        raise ValueError(f"file not found: {value} (looked for {resolved})")
    if not os.access(resolved, os.R_OK):
        raise ValueError(f"file not readable: {value}")
    return resolved


def resolve_existing_dir(value: str, info: ValidationInfo) -> Path:
    """The absolute path of an existing directory named in a scenario; ValueError if none."""
    resolved = (_base_dir(info) / value).resolve()
    if not resolved.is_dir():
        raise ValueError(f"directory not found: {value} (looked for {resolved})")
    return resolved


class FileRef(StrictModel):
    """A section naming a file in its ``path`` field (or the field ``_file_field`` names;
    subclasses check it exists with :func:`resolve_existing_file`, on the field). The
    field keeps the path as written (so dumps never contain absolute paths);
    :attr:`resolved_path` is the absolute one (None when the field is empty)."""

    _file_field: ClassVar[str] = "path"
    _resolved: Path | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _remember_resolved(self, info: ValidationInfo) -> FileRef:
        value = getattr(self, self._file_field)
        if value is not None:
            self._resolved = (_base_dir(info) / value).resolve()
        return self

    @property
    def resolved_path(self) -> Path | None:
        return self._resolved


# --------------------------------------------------------------------------------------
# Length distributions
# --------------------------------------------------------------------------------------

#: Published means (vLLM paper, section 6.1) with assumed spreads (only the means are
#: published): role -> (mean tokens, coefficient of variation) of a lognormal.
LENGTH_PRESETS: dict[str, dict[str, tuple[float, float]]] = {
    "sharegpt": {"input": (161.31, 1.2), "output": (337.99, 1.0)},
    "alpaca": {"input": (19.31, 0.8), "output": (58.45, 0.9)},
}

Role = Literal["input", "output"]


class FixedLength(StrictModel):
    kind: Literal["fixed"] = "fixed"
    value: int = Field(ge=1)


class UniformLength(StrictModel):
    """Integers uniform in ``[min, max]`` (both inclusive)."""

    kind: Literal["uniform"] = "uniform"
    min: int = Field(ge=1)
    max: int = Field(ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self


class LognormalLength(StrictModel):
    """A lognormal with the given mean and coefficient of variation, rounded."""

    kind: Literal["lognormal"] = "lognormal"
    mean: float = Field(gt=0)
    cv: float = Field(ge=0)


class EmpiricalLength(FileRef):
    """Lengths resampled from a file: one integer per line, or two columns
    (input, output). ``column`` picks one; by default input reads column 0 and output
    column 1 of a two-column file. Input and output drawn from the same two-column file
    are sampled as pairs (same row)."""

    kind: Literal["empirical"] = "empirical"
    path: str
    column: int | None = Field(default=None, ge=0)

    @field_validator("path")
    @classmethod
    def _readable_table(cls, value: str, info: ValidationInfo) -> str:
        load_length_table(resolve_existing_file(value, info))
        return value

    @model_validator(mode="after")
    def _column_exists(self) -> EmpiricalLength:
        width = load_length_table(self.resolved_path).shape[1]
        if self.column is not None and self.column >= width:
            raise ValueError(f"column {self.column} not in {self.path} ({width} column(s))")
        return self

    def column_for(self, role: Role) -> int:
        if self.column is not None:
            return self.column
        width = load_length_table(self.resolved_path).shape[1]
        return 1 if role == "output" and width > 1 else 0


class PresetLength(StrictModel):
    """A named dataset's length distribution (see :data:`LENGTH_PRESETS`)."""

    kind: Literal["preset"] = "preset"
    name: Literal["sharegpt", "alpaca"]


def expand_length_shorthand(value: Any) -> Any:
    """``128`` means fixed 128 and ``sharegpt`` means the preset."""
    if isinstance(value, int) and not isinstance(value, bool):
        return {"kind": "fixed", "value": value}
    if isinstance(value, str):
        return {"kind": "preset", "name": value}
    return value


LengthDist = Annotated[
    FixedLength | UniformLength | LognormalLength | EmpiricalLength | PresetLength,
    Field(discriminator="kind"),
    BeforeValidator(expand_length_shorthand),
]


def _lognormal(mean: float, cv: float, size: int, rng: np.random.Generator) -> np.ndarray:
    sigma2 = np.log1p(cv * cv)
    mu = np.log(mean) - sigma2 / 2
    return rng.lognormal(mu, np.sqrt(sigma2), size)


def sample_lengths(
    dist: Any, size: int, rng: np.random.Generator, role: Role = "input", rows=None
) -> np.ndarray:
    """``size`` integer lengths >= 1 (int64). ``rows`` (empirical only) fixes the table
    rows to read, so paired input/output columns stay paired."""
    if isinstance(dist, FixedLength):
        return np.full(size, dist.value, dtype=np.int64)
    if isinstance(dist, UniformLength):
        return rng.integers(dist.min, dist.max, size=size, endpoint=True, dtype=np.int64)
    if isinstance(dist, EmpiricalLength):
        table = load_length_table(dist.resolved_path)
        if rows is None:
            rows = rng.integers(0, table.shape[0], size=size)
        return np.maximum(table[rows, dist.column_for(role)], 1)
    if isinstance(dist, LognormalLength):
        mean, cv = dist.mean, dist.cv
    else:
        mean, cv = LENGTH_PRESETS[dist.name][role]
    return np.maximum(np.rint(_lognormal(mean, cv, size, rng)).astype(np.int64), 1)


class LengthTableError(ValueError):
    """A malformed length table; the message is ``file:line: column N: expected ...``."""


@functools.lru_cache(maxsize=16)
def _cached_table(path: str, mtime_ns: int) -> np.ndarray:
    rows: list[list[int]] = []
    first = True
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            cells = text.replace(",", " ").split()
            if first and not cells[0].lstrip("-").isdigit():
                first = False
                continue  # a header line (only the first line may be one)
            first = False
            rows.append([_table_cell(path, line_no, col, cell) for col, cell in enumerate(cells)])
            if len(rows[-1]) != len(rows[0]):
                raise LengthTableError(
                    f"{path}:{line_no}: expected {len(rows[0])} column(s), got {len(cells)}"
                )
    if not rows:
        raise LengthTableError(f"{path}: no lengths found")
    table = np.asarray(rows, dtype=np.int64)
    table.setflags(write=False)
    return table


def _table_cell(path: str, line_no: int, col: int, cell: str) -> int:
    if not cell.isdigit() or int(cell) < 1:
        raise LengthTableError(
            f"{path}:{line_no}: column {col}: expected a positive integer, got {cell!r}"
        )
    return int(cell)


def load_length_table(path: str | Path) -> np.ndarray:
    """The lengths in ``path`` as a read-only (rows, columns) int64 array (cached).
    Raises LengthTableError on a bad row, OSError if unreadable."""
    path = str(path)
    return _cached_table(path, os.stat(path).st_mtime_ns)


# --------------------------------------------------------------------------------------
# Arrivals
# --------------------------------------------------------------------------------------


class PoissonArrival(StrictModel):
    kind: Literal["poisson"] = "poisson"
    rate_rps: float = Field(gt=0)


class GammaArrival(StrictModel):
    """Gamma inter-arrival gaps: ``cv`` > 1 is burstier than Poisson (cv = 1)."""

    kind: Literal["gamma"] = "gamma"
    rate_rps: float = Field(gt=0)
    cv: float = Field(gt=0)


class ConstantArrival(StrictModel):
    kind: Literal["constant"] = "constant"
    rate_rps: float = Field(gt=0)


class TraceArrival(FileRef):
    """Replay a trace: arrival times and lengths come from the file (``input`` and
    ``output`` of the workload are ignored). Arrival times are seconds from the first
    row, multiplied by ``time_scale`` (0.5 replays twice as fast)."""

    kind: Literal["trace"] = "trace"
    format: Literal["azure-csv", "mooncake-jsonl"]
    path: str
    time_scale: float = Field(default=1.0, gt=0)

    @field_validator("path")
    @classmethod
    def _readable_trace(cls, value: str, info: ValidationInfo) -> str:
        resolved = resolve_existing_file(value, info)
        if "format" in info.data:  # a bad format is reported on its own field
            load_trace(resolved, info.data["format"])
        return value

    def trace(self) -> Trace:
        return load_trace(self.resolved_path, self.format)


def _poisson_by_default(value: Any) -> Any:
    """``arrival: {rate_rps: 5}`` (or a ``--set`` creating it) means Poisson."""
    if isinstance(value, dict) and "kind" not in value:
        return {"kind": "poisson", **value}
    return value


ArrivalSpec = Annotated[
    PoissonArrival | GammaArrival | ConstantArrival | TraceArrival,
    Field(discriminator="kind"),
    BeforeValidator(_poisson_by_default),
]


def _gaps(spec: Any, size: int, rng: np.random.Generator) -> np.ndarray:
    if isinstance(spec, PoissonArrival):
        return rng.exponential(1.0 / spec.rate_rps, size)
    if isinstance(spec, GammaArrival):
        shape = 1.0 / (spec.cv * spec.cv)
        return rng.gamma(shape, 1.0 / (spec.rate_rps * shape), size)
    return np.full(size, 1.0 / spec.rate_rps)


def arrival_times(
    spec: Any, rng: np.random.Generator, count: int | None, duration_s: float | None
) -> np.ndarray:
    """Arrival instants (s, increasing) of a synthetic process: ``count`` of them, or all
    before ``duration_s``, whichever ends first. Vectorised in chunks."""
    if count is not None:
        times = np.cumsum(_gaps(spec, count, rng))
        return times if duration_s is None else times[times < duration_s]
    assert duration_s is not None
    expected = spec.rate_rps * duration_s
    chunk = int(expected + 6 * np.sqrt(expected) + 16)
    times = np.cumsum(_gaps(spec, chunk, rng))
    while times[-1] < duration_s:
        more = times[-1] + np.cumsum(_gaps(spec, chunk, rng))
        times = np.concatenate([times, more])
    return times[times < duration_s]


# --------------------------------------------------------------------------------------
# The workload section
# --------------------------------------------------------------------------------------


class CategoricalSpec(StrictModel):
    """A pick among ``count`` categories 0..count-1: uniform, Zipf (category i has weight
    ``1 / (i + 1) ** zipf_exponent``, so 0 is the most common) or explicit ``weights``."""

    count: int = Field(default=1, ge=1)
    pick: Literal["uniform", "zipf", "weights"] = "uniform"
    zipf_exponent: float = Field(default=1.0, gt=0)
    weights: list[float] | None = None

    @model_validator(mode="after")
    def _weights_match(self) -> CategoricalSpec:
        if self.pick == "weights":
            w = self.weights or []
            if len(w) != self.count or min(w, default=-1) < 0 or sum(w) <= 0:
                raise ValueError(
                    f"pick 'weights' needs {self.count} non-negative weights with a "
                    f"positive sum, got {self.weights}"
                )
        return self

    def probabilities(self) -> np.ndarray:
        if self.pick == "weights":
            w = np.asarray(self.weights, dtype=np.float64)
        elif self.pick == "zipf":
            w = 1.0 / np.arange(1, self.count + 1, dtype=np.float64) ** self.zipf_exponent
        else:
            w = np.ones(self.count)
        return w / w.sum()

    def sample(self, size: int, rng: np.random.Generator) -> np.ndarray:
        if self.count == 1:
            return np.zeros(size, dtype=np.int64)
        return rng.choice(self.count, size=size, p=self.probabilities())


class PrefixGroupsSpec(StrictModel):
    """``num_groups`` shared system prompts (lengths drawn once per group from
    ``length``); a ``fraction`` of requests carry one, picked by ``pick``."""

    num_groups: int = Field(default=0, ge=0)
    length: LengthDist = FixedLength(value=256)
    pick: Literal["uniform", "zipf"] = "uniform"
    zipf_exponent: float = Field(default=1.0, gt=0)
    fraction: float = Field(default=1.0, ge=0, le=1)


class SessionsSpec(StrictModel):
    """Multi-turn sessions: the arrival process starts sessions; each has ``turns``
    turns, ``think_time_s`` apart (fixed, or exponential with that mean)."""

    turns: LengthDist = FixedLength(value=4)
    think_time_s: float = Field(default=10.0, ge=0)
    think_time: Literal["fixed", "exponential"] = "exponential"


class WorkloadSpec(StrictModel):
    """The traffic. Lengths accept shorthands: ``input: 128`` (fixed) and
    ``input: sharegpt`` (preset). Without ``sessions`` the arrival rate is in requests
    per second; with them it is in sessions per second."""

    arrival: ArrivalSpec = PoissonArrival(rate_rps=1.0)
    input: LengthDist = PresetLength(name="sharegpt")
    output: LengthDist = PresetLength(name="sharegpt")
    prefix: PrefixGroupsSpec = PrefixGroupsSpec()
    sessions: SessionsSpec | None = None
    n: int = Field(default=1, ge=1, lt=STREAM_STRIDE)
    tenants: CategoricalSpec = CategoricalSpec()
    priorities: CategoricalSpec = CategoricalSpec()

    @model_validator(mode="after")
    def _trace_takes_lengths_from_file(self) -> WorkloadSpec:
        if isinstance(self.arrival, TraceArrival) and (
            self.sessions is not None or self.prefix.num_groups > 0
        ):
            raise ValueError("trace replay does not combine with sessions or prefix groups")
        return self


# --------------------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------------------


class ModelLimits(Protocol):
    """What generation needs from a ModelSpec."""

    vocab_size: int
    max_model_len: int


class _Plan(NamedTuple):
    """Per-request columns before token synthesis (all int64 but arrival_s)."""

    arrival_s: np.ndarray
    own_len: np.ndarray
    output_len: np.ndarray
    prefix_group: np.ndarray
    session: np.ndarray
    turn: np.ndarray
    tenant: np.ndarray
    priority: np.ndarray
    source_row: np.ndarray  # trace row, -1 for synthetic requests


def generate_requests(
    scenario_or_workload: Any,
    model: ModelLimits,
    *,
    num_requests: int | None = None,
    duration_s: float | None = None,
    rng: np.random.Generator,
    token_seed: int | None = None,
) -> list[Request]:
    """The request stream, sorted by arrival, ``req_id`` = index.

    Accepts a Scenario (its ``workload``; ``num_requests``, ``duration_s`` and the token
    seed default to its ``simulation`` section) or a bare WorkloadSpec (token seed 0).
    Generation stops at ``num_requests`` or at ``duration_s``, whichever comes first (a
    trace replays whole without either).
    Draws only from ``rng``; mutates nothing else. Raises ValueError if neither limit
    is given, TraceError/LengthTableError for a bad file.
    """
    spec = getattr(scenario_or_workload, "workload", scenario_or_workload)
    sim = getattr(scenario_or_workload, "simulation", None)
    if sim is not None:
        num_requests = sim.num_requests if num_requests is None else num_requests
        duration_s = sim.duration_s if duration_s is None else duration_s
        token_seed = sim.seed if token_seed is None else token_seed
    replay = isinstance(spec.arrival, TraceArrival)
    if num_requests is None and duration_s is None and not replay:
        raise ValueError("generate_requests needs num_requests or duration_s")
    token_seed = 0 if token_seed is None else token_seed
    if isinstance(spec.arrival, TraceArrival):
        plan, prefixes = _plan_trace(spec, model, num_requests, duration_s), []
    else:
        prefixes = _prefix_lengths(spec.prefix, model, rng)
        plan = _plan_synthetic(spec, model, rng, num_requests, duration_s, prefixes)
    return _build_requests(spec, model, plan, prefixes, rng, token_seed)


def _prefix_lengths(prefix: PrefixGroupsSpec, model: ModelLimits, rng) -> list[int]:
    if prefix.num_groups == 0:
        return []
    lengths = sample_lengths(prefix.length, prefix.num_groups, rng, "input")
    # leave room for one own token and one output token
    return [int(x) for x in np.minimum(lengths, max(model.max_model_len - 2, 0))]


def _plan_synthetic(spec, model, rng, num_requests, duration_s, prefixes) -> _Plan:
    starts = arrival_times(spec.arrival, rng, num_requests, duration_s)
    units = len(starts)
    group = _pick_groups(spec.prefix, units, rng)
    tenant = spec.tenants.sample(units, rng)
    priority = spec.priorities.sample(units, rng)
    if spec.sessions is None:
        turns = np.ones(units, dtype=np.int64)
        offsets = np.zeros(units)
    else:
        turns = sample_lengths(spec.sessions.turns, units, rng, "input")
        offsets = _think_offsets(spec.sessions, turns, rng)
    unit = np.repeat(np.arange(units), turns)
    turn = np.arange(len(unit)) - np.repeat(np.cumsum(turns) - turns, turns)
    own = _paired_lengths(spec, len(unit), rng)
    # group -1 (no prefix) indexes the trailing 0
    prefix_len = np.asarray(prefixes + [0], dtype=np.int64)[group[unit]]
    own_len, output_len, keep = _clip(own[0], own[1], prefix_len, turn, model.max_model_len)
    arrival = starts[unit] + offsets
    if duration_s is not None:
        keep &= arrival < duration_s
    session = unit if spec.sessions is not None else np.full(len(unit), -1, dtype=np.int64)
    columns = (arrival, own_len, output_len, group[unit], session, turn, tenant[unit])
    columns += (priority[unit], np.full(len(unit), -1, dtype=np.int64))
    plan = _Plan(*(c[keep] for c in columns))
    return _sorted_prefix(plan, num_requests)


def _pick_groups(prefix: PrefixGroupsSpec, size: int, rng) -> np.ndarray:
    """Prefix group per unit, -1 for none."""
    if prefix.num_groups == 0:
        return np.full(size, -1, dtype=np.int64)
    picker = CategoricalSpec(
        count=prefix.num_groups, pick=prefix.pick, zipf_exponent=prefix.zipf_exponent
    )
    groups = picker.sample(size, rng)
    return np.where(rng.random(size) < prefix.fraction, groups, -1)


def _think_offsets(sessions: SessionsSpec, turns: np.ndarray, rng) -> np.ndarray:
    """Arrival offset of every turn from its session's start (0 for the first turn)."""
    total = int(turns.sum())
    if sessions.think_time == "fixed":
        gaps = np.full(total, sessions.think_time_s)
    else:
        gaps = rng.exponential(sessions.think_time_s, total) if sessions.think_time_s else None
        gaps = np.zeros(total) if gaps is None else gaps
    first = np.cumsum(turns) - turns
    gaps[first] = 0.0
    run = np.cumsum(gaps)
    return run - np.repeat(run[first], turns)


def _paired_lengths(spec: WorkloadSpec, size: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """Own prompt and output lengths; one empirical two-column file is sampled by row."""
    rows = None
    same_table = (
        isinstance(spec.input, EmpiricalLength)
        and isinstance(spec.output, EmpiricalLength)
        and spec.input.resolved_path == spec.output.resolved_path
    )
    if same_table:
        rows = rng.integers(0, load_length_table(spec.input.resolved_path).shape[0], size=size)
    own = sample_lengths(spec.input, size, rng, "input", rows)
    out = sample_lengths(spec.output, size, rng, "output", rows)
    return own, out


def _clip(own, out, prefix_len, turn, max_len: int):
    """Clip to ``prompt + output <= max_len`` (each >= 1); returns (own, out, keep).
    Session turns carry their history (previous prompt + output); a turn without room
    for one own and one output token ends its session (``keep`` false from there on)."""
    if turn.max(initial=0) > 0:
        return _clip_sessions(own, out, prefix_len, turn, max_len)
    # without sessions the history is the system prompt, already <= max_len - 2
    own = np.clip(own, 1, max_len - 1 - prefix_len)
    out = np.clip(out, 1, max_len - prefix_len - own)
    return own, out, np.ones(len(own), dtype=bool)


def _clip_sessions(own, out, prefix_len, turn, max_len: int):
    """Sequential, since each turn's room depends on the clipped previous turn. Plain
    Python lists: numpy scalar indexing would cost ~10x in this loop."""
    own_list, out_list, keep = own.tolist(), out.tolist(), [True] * len(own)
    prefix_list, turn_list = prefix_len.tolist(), turn.tolist()
    history = ended = 0
    for i, t in enumerate(turn_list):
        if t == 0:
            history, ended = prefix_list[i], False
        else:
            history += own_list[i - 1] + out_list[i - 1]
        if ended or history + 2 > max_len:
            keep[i], ended = False, True
            continue
        own_list[i] = min(own_list[i], max_len - 1 - history)
        out_list[i] = min(out_list[i], max_len - history - own_list[i])
    own_array = np.asarray(own_list, dtype=np.int64)
    return own_array, np.asarray(out_list, dtype=np.int64), np.asarray(keep)


def _sorted_prefix(plan: _Plan, num_requests: int | None) -> _Plan:
    """Sort by arrival (ties keep generation order, so a turn never precedes its
    predecessor) and keep the first ``num_requests``: a prefix in time, so every kept
    turn's predecessors are kept too."""
    order = np.argsort(plan.arrival_s, kind="stable")[:num_requests]
    return _Plan(*(column[order] for column in plan))


def _plan_trace(spec, model, num_requests, duration_s) -> _Plan:
    trace = spec.arrival.trace()
    arrival = trace.arrival_s * spec.arrival.time_scale
    order = np.argsort(arrival, kind="stable")
    if duration_s is not None:
        order = order[arrival[order] < duration_s]
    order = order[:num_requests]
    max_len = model.max_model_len
    own = np.clip(trace.input_len[order], 1, max_len - 1)
    out = np.clip(trace.output_len[order], 1, np.maximum(max_len - own, 1))
    size = len(order)
    minus_one = np.full(size, -1, dtype=np.int64)
    zeros = np.zeros(size, dtype=np.int64)
    return _Plan(arrival[order], own, out, minus_one, minus_one, zeros, zeros, zeros, order)


def _build_requests(spec, model, plan: _Plan, prefixes, rng, token_seed) -> list[Request]:
    vocab = model.vocab_size
    group_tokens = [rng.integers(0, vocab, size=n, dtype=np.int32) for n in prefixes]
    hashes = spec.arrival.trace().hash_ids if isinstance(spec.arrival, TraceArrival) else None
    fresh_len = plan.own_len
    if hashes is not None:  # only the tokens past a prompt's hash-id blocks are drawn
        covered = [len(hashes[row]) * MOONCAKE_BLOCK_TOKENS for row in plan.source_row]
        fresh_len = np.maximum(plan.own_len - np.asarray(covered, dtype=np.int64), 0)
    own_tokens = rng.integers(0, vocab, size=int(fresh_len.sum()), dtype=np.int32)
    own_end = np.cumsum(fresh_len).tolist()
    own_len = fresh_len.tolist()
    prompt_len = plan.own_len.tolist()
    previous = _previous_turn(plan)
    outputs = _previous_outputs(plan, previous, token_seed, vocab)
    group, prev_list, rows = plan.prefix_group.tolist(), previous.tolist(), plan.source_row
    prompts: list[np.ndarray] = []
    for i in range(len(own_len)):
        own = own_tokens[own_end[i] - own_len[i] : own_end[i]]
        if hashes is not None:
            prompt = _hashed_prompt(hashes[rows[i]], prompt_len[i], own, token_seed, vocab)
        elif prev_list[i] >= 0:
            prompt = np.concatenate([prompts[prev_list[i]], outputs[i], own])
        elif group[i] >= 0:
            prompt = np.concatenate([group_tokens[group[i]], own])
        else:
            prompt = own
        prompts.append(prompt)
    return [_request(i, plan, prompt, spec.n) for i, prompt in enumerate(prompts)]


def _previous_turn(plan: _Plan) -> np.ndarray:
    """Index of each request's previous turn in its session, -1 for none. Kept turns of
    a session are 0..k (see _sorted_prefix), so the previous turn is the neighbour in
    (session, turn) order."""
    previous = np.full(len(plan.turn), -1, dtype=np.int64)
    by_session = np.lexsort((plan.turn, plan.session))
    session = plan.session[by_session]
    same = (session[1:] == session[:-1]) & (session[1:] >= 0)
    previous[by_session[1:][same]] = by_session[:-1][same]
    return previous


def _previous_outputs(plan: _Plan, previous: np.ndarray, seed: int, vocab: int) -> list:
    """For each request with a previous turn, that turn's output tokens (sample 0's
    stream, exactly what the engine will generate for it); one vectorised hash call."""
    has_previous = np.flatnonzero(previous >= 0)
    lengths = plan.output_len[previous[has_previous]]
    # states per stream, then repeated: the same as output_token_ids elementwise
    states = output_stream_states(seed, stream_id(previous[has_previous], 0))
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    positions = np.arange(int(lengths.sum())) - starts
    tokens = output_tokens_at(np.repeat(states, lengths), positions, vocab)
    pieces = np.split(tokens, np.cumsum(lengths)[:-1]) if len(lengths) else []
    outputs: list = [None] * len(previous)
    for index, piece in zip(has_previous.tolist(), pieces):
        outputs[index] = piece
    return outputs


def _request(i: int, plan: _Plan, prompt: np.ndarray, n: int) -> Request:
    return Request(
        req_id=i,
        arrival_s=float(plan.arrival_s[i]),
        prompt=prompt,
        output_len=int(plan.output_len[i]),
        tenant=int(plan.tenant[i]),
        priority=int(plan.priority[i]),
        prefix_group=int(plan.prefix_group[i]),
        session=int(plan.session[i]),
        turn=int(plan.turn[i]),
        n=n,
    )


def _hashed_prompt(
    hash_ids: np.ndarray, length: int, rest: np.ndarray, seed: int, vocab: int
) -> np.ndarray:
    """A ``length``-token prompt: the hash-id blocks cut to the length, then ``rest``
    (exactly the tokens past the blocks)."""
    blocks = hash_block_tokens(seed, hash_ids[: -(-length // MOONCAKE_BLOCK_TOKENS)], vocab)
    return np.concatenate([blocks[:length], rest])
