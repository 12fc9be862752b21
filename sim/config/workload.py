"""The ``workload`` section: arrivals, lengths, shared prefixes, sessions, tenants.

Specs only (validated once, files read to fail early); :mod:`sim.workload` turns them
into the request stream. Lengths accept shorthands (``input: 128`` is fixed, ``input:
sharegpt`` a preset), arrivals default to Poisson.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    BeforeValidator,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from sim.config.files import FileRef, resolve_existing_file
from sim.config.schema import StrictModel
from sim.config.tables import load_length_table
from sim.config.traces import Trace, load_trace

#: Output stream ids are ``req_id * STREAM_STRIDE + sample_index`` (sim.workload.tokens),
#: which bounds ``n``.
STREAM_STRIDE = 1 << 16

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
