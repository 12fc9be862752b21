"""The ``workload`` section: arrivals (:mod:`sim.config.arrivals`), lengths, shared
prefixes, prompt pools, sessions, tenants.

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

from sim.config.arrivals import (
    ArrivalSpec,
    PoissonArrival,
    TraceArrival,
)
from sim.config.files import FileRef, resolve_existing_file
from sim.inputs.schema import StrictModel
from sim.inputs.tables import load_length_table

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
    """The same length every time."""

    kind: Literal["fixed"] = "fixed"
    """Selects a fixed length; a bare integer (``input: 128``) is the shorthand."""
    value: int = Field(ge=1)
    """The length every draw returns, in tokens (turns, in ``sessions.turns``); at least 1."""


class UniformLength(StrictModel):
    """Integers uniform in ``[min, max]`` (both inclusive)."""

    kind: Literal["uniform"] = "uniform"
    """Selects integers drawn uniformly from [``min``, ``max``]."""
    min: int = Field(ge=1)
    """Smallest value, inclusive, in tokens (turns, in ``sessions.turns``); at least 1."""
    max: int = Field(ge=1)
    """Largest value, inclusive; at least ``min``."""

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self


class LognormalLength(StrictModel):
    """A lognormal with the given mean and coefficient of variation, rounded."""

    kind: Literal["lognormal"] = "lognormal"
    """Selects a lognormal distribution, rounded to integers (at least 1)."""
    mean: float = Field(gt=0, le=1e9)
    """Mean of the distribution, in tokens (turns, in ``sessions.turns``); at most 1e9."""
    cv: float = Field(ge=0, le=100)
    """Coefficient of variation (standard deviation / mean); 0 returns the mean every time.
    At most 100 (beyond it nearly every draw is 1 token or clipped)."""


class EmpiricalLength(FileRef):
    """Lengths resampled from a file: one integer per line, or two columns
    (input, output). ``column`` picks one; by default input reads column 0 and output
    column 1 of a two-column file. Input and output drawn from the same two-column file
    are sampled as pairs (same row)."""

    kind: Literal["empirical"] = "empirical"
    """Selects lengths resampled from a table file."""
    path: str
    """The table: one positive integer per line, or two columns (input, output) split by commas or
    spaces; ``#`` comments and one header line allowed. Relative to the scenario file."""
    column: int | None = Field(default=None, ge=0)
    """Column to read, from 0. Unset: ``input`` reads column 0 and ``output`` column 1 of a
    two-column table (drawn as pairs from the same row), column 0 otherwise."""

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
    """A dataset's length distribution, by name (:data:`LENGTH_PRESETS`)."""

    kind: Literal["preset"] = "preset"
    """Selects a dataset's length distribution; the bare name (``input: sharegpt``) is the
    shorthand."""
    name: Literal["sharegpt", "alpaca"]
    """``sharegpt`` (mean 161 prompt and 338 output tokens) or ``alpaca`` (19 and 58): the vLLM
    paper's means, drawn from lognormals with assumed spreads."""


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


class CategoricalSpec(StrictModel):
    """A pick among ``count`` categories 0..count-1: uniform, Zipf (category i has weight
    ``1 / (i + 1) ** zipf_exponent``, so 0 is the most common) or explicit ``weights``."""

    count: int = Field(default=1, ge=1)
    """Number of categories, numbered 0 to count - 1; 1: every request is in category 0."""
    pick: Literal["uniform", "zipf", "weights"] = "uniform"
    """How a category is drawn: ``uniform``, ``zipf`` (category 0 the most common) or explicit
    ``weights``."""
    zipf_exponent: float = Field(default=1.0, gt=0)
    """Exponent s of ``zipf``: category i has weight 1 / (i + 1)^s."""
    weights: list[float] | None = None
    """One non-negative weight per category for ``pick: weights``, normalised (their sum must be
    positive)."""

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
    """Distinct shared system prompts; 0: no shared prefixes."""
    length: LengthDist = FixedLength(value=256)
    """Length in tokens of each group's system prompt, drawn once per group (a distribution, an
    integer or a preset name)."""
    pick: Literal["uniform", "zipf"] = "uniform"
    """How a request's group is picked: ``uniform`` or ``zipf`` (group 0 the most popular)."""
    zipf_exponent: float = Field(default=1.0, gt=0)
    """Exponent s of ``zipf``: group i has weight 1 / (i + 1)^s."""
    fraction: float = Field(default=1.0, ge=0, le=1)
    """Fraction of requests (of sessions, with ``workload.sessions``) that start with a group's
    system prompt, in [0, 1]."""


class PromptPoolSpec(StrictModel):
    """A finite set of ``distinct`` prompts that requests reuse whole, as benchmark
    clients cycle through a fixed prompt list (inference-perf's ``shared_prefix`` data:
    ``num_groups x num_prompts_per_group`` prompts sent in turn). Entry ``e``'s own
    tokens and length are drawn once; with prefix groups it carries group ``e mod
    num_groups``'s system prompt. A repeated prompt is token for token the same, so a
    prefix cache can hit all of it."""

    distinct: int = Field(ge=1, le=10_000_000)
    """How many distinct prompts there are (own tokens after any system prompt)."""
    order: Literal["cycle", "uniform"] = "cycle"
    """``cycle``: request k sends entry ``perm[k mod distinct]`` of one shuffled order (a client
    walking its prompt list again and again); ``uniform``: each request picks an entry at
    random."""


class SessionsSpec(StrictModel):
    """Multi-turn sessions: the arrival process starts sessions; each has ``turns``
    turns, ``think_time_s`` apart (fixed, or exponential with that mean)."""

    turns: LengthDist = FixedLength(value=4)
    """Turns per session (a distribution, or an integer: ``turns: 4``). Each turn's prompt is the
    conversation so far plus ``workload.input`` new tokens."""
    think_time_s: float = Field(default=10.0, ge=0)
    """Mean seconds from one turn's arrival to the next turn's (the next turn does not wait for the
    answer)."""
    think_time: Literal["fixed", "exponential"] = "exponential"
    """``fixed`` gaps of ``think_time_s``, or ``exponential`` gaps with that mean."""


class WorkloadSpec(StrictModel):
    """The traffic. Lengths accept shorthands: ``input: 128`` (fixed) and
    ``input: sharegpt`` (preset). Without ``sessions`` the arrival rate is in requests
    per second; with them it is in sessions per second."""

    arrival: ArrivalSpec = PoissonArrival(rate_rps=1.0)
    """The arrival process: ``poisson`` (the default, also when ``kind`` is left out), ``gamma``,
    ``constant``, ``stages`` (rates that change in steps), or ``trace`` replay."""
    input: LengthDist = PresetLength(name="sharegpt")
    """Prompt length in tokens, after any shared prefix (with sessions: each turn's new tokens): a
    distribution, an integer (fixed) or a preset name (``sharegpt``, ``alpaca``). Requests are
    clipped so prompt plus output fits ``model.max_model_len``."""
    output: LengthDist = PresetLength(name="sharegpt")
    """Output length in tokens, how many each request decodes before it stops (known to the
    simulator, not to the scheduler, unless it is an oracle): a distribution, an integer (fixed)
    or a preset name."""
    prefix: PrefixGroupsSpec = PrefixGroupsSpec()
    """Shared system prompts, for prefix caching: how many, how long and how often used."""
    request_timeout_s: float | None = Field(default=None, gt=0)
    """Seconds after its arrival at which the client gives up on a request not finished by then
    (benchmark clients do: aiohttp's default total timeout is 300 s); the engine aborts it and
    frees its KV, and it counts as failed. Null (default): clients wait as long as it takes."""
    prompts: PromptPoolSpec | None = None
    """A finite set of distinct prompts reused whole (a benchmark client's prompt list); null
    (default): every request's own tokens are its own. Not with sessions or a trace."""
    sessions: SessionsSpec | None = None
    """Multi-turn conversations; null (default): every request stands alone."""
    n: int = Field(default=1, ge=1, lt=STREAM_STRIDE)
    """Parallel samples per request (vLLM's ``n``): the prompt is prefilled once and the samples
    fork from it, sharing its blocks copy-on-write; below 65536."""
    tenants: CategoricalSpec = CategoricalSpec()
    """Tenant of each request (of each session, with sessions), for fair-share scheduling;
    requests.csv records it."""
    priorities: CategoricalSpec = CategoricalSpec()
    """Priority of each request, higher is more important: ``priority`` scheduling serves it first,
    the ``lowest-priority`` victim preempts it last."""

    @model_validator(mode="after")
    def _trace_takes_lengths_from_file(self) -> WorkloadSpec:
        if isinstance(self.arrival, TraceArrival) and (
            self.sessions is not None or self.prefix.num_groups > 0
        ):
            raise ValueError("trace replay does not combine with sessions or prefix groups")
        if self.prompts is not None and (
            self.sessions is not None or isinstance(self.arrival, TraceArrival)
        ):
            raise ValueError("a prompt pool (prompts) does not combine with sessions or a trace")
        return self
