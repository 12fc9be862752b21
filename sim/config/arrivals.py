"""Arrival processes of the ``workload`` section: Poisson, gamma, evenly spaced, staged
rates, or a trace replayed (:mod:`sim.inputs.traces` reads the trace files). Re-exported
by :mod:`sim.config.workload`; :mod:`sim.workload.sampling` draws the instants.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    BeforeValidator,
    Field,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from sim.config.files import FileRef, resolve_existing_file
from sim.inputs.schema import StrictModel, drop_unset
from sim.inputs.traces import MOONCAKE_BLOCK_TOKENS, Trace, load_trace


class PoissonArrival(StrictModel):
    """Poisson arrivals: exponential gaps with mean ``1 / rate_rps``."""

    kind: Literal["poisson"] = "poisson"
    """Selects Poisson arrivals (exponential gaps); the default when ``kind`` is left out."""
    rate_rps: float = Field(gt=0)
    """Mean arrival rate, requests per second (sessions per second with ``workload.sessions``)."""


class GammaArrival(StrictModel):
    """Gamma inter-arrival gaps: ``cv`` > 1 is burstier than Poisson (cv = 1)."""

    kind: Literal["gamma"] = "gamma"
    """Selects gamma-distributed gaps between arrivals."""
    rate_rps: float = Field(gt=0)
    """Mean arrival rate, requests per second (sessions per second with ``workload.sessions``)."""
    cv: float = Field(ge=1e-3, le=1e3)
    """Coefficient of variation of the gaps: 1 is Poisson, above 1 burstier, below 1 smoother.
    Between 0.001 and 1000: the gamma's shape is 1 / cv², which breaks down beyond."""


class ConstantArrival(StrictModel):
    """Arrivals evenly spaced, ``1 / rate_rps`` seconds apart."""

    kind: Literal["constant"] = "constant"
    """Selects evenly spaced arrivals, ``1 / rate_rps`` seconds apart."""
    rate_rps: float = Field(gt=0)
    """Arrival rate, requests per second (sessions per second with ``workload.sessions``)."""


class ArrivalStage(StrictModel):
    """One stage of a staged load: ``rate_rps`` for ``duration_s`` seconds."""

    rate_rps: float = Field(gt=0, le=1e9)
    """Mean arrival rate during the stage, requests per second (sessions per second with
    ``workload.sessions``); at most 1e9."""
    duration_s: float = Field(gt=0, le=1e9)
    """How long the stage sends, in seconds; the next stage starts when it ends."""


class StagedArrival(StrictModel):
    """Arrival rates in stages, one after the other (``8 req/s for 600 s, then 20 req/s for
    600 s``), as load generators run them (inference-perf's ``load.stages``, a rate sweep).
    Each stage draws its arrivals from ``process`` at its own rate; without ``num_requests``
    or ``duration_s`` in ``simulation`` the run ends with the last stage."""

    kind: Literal["stages"] = "stages"
    """Selects staged arrival rates."""
    process: Literal["poisson", "poisson-count", "constant", "gamma"] = "poisson"
    """How arrivals are spaced within a stage: ``poisson`` (exponential gaps), ``poisson-count``
    (exactly ``int(rate_rps x duration_s)`` arrivals with exponential gaps scaled to end at the
    stage's end: inference-perf's ``constant`` load), ``constant`` (evenly spaced, ``1 /
    rate_rps`` apart, the first at the stage's start) or ``gamma`` (gaps with coefficient of
    variation ``cv``)."""
    cv: float = Field(default=1.0, ge=1e-3, le=1e3)
    """``gamma`` only: coefficient of variation of the gaps (1 is Poisson)."""
    stages: list[ArrivalStage] = Field(min_length=1, max_length=10_000)
    """The stages in order, each ``{rate_rps, duration_s}``; at least one."""

    @property
    def total_duration_s(self) -> float:
        """Seconds from the first stage's start to the last one's end."""
        return float(sum(stage.duration_s for stage in self.stages))

    def stage_starts(self) -> np.ndarray:
        """Each stage's start, seconds from the run's start (float64)."""
        durations = np.array([stage.duration_s for stage in self.stages], dtype=np.float64)
        return np.concatenate([[0.0], np.cumsum(durations)[:-1]])

    @property
    def expected_requests(self) -> float:
        return float(sum(stage.rate_rps * stage.duration_s for stage in self.stages))


class TraceArrival(FileRef):
    """Replay a trace: arrival times and lengths come from the file (``input`` and
    ``output`` of the workload are ignored). Arrival times are seconds from the first
    row, multiplied by ``time_scale`` (0.5 replays twice as fast)."""

    kind: Literal["trace"] = "trace"
    """Selects replaying a trace file: arrival times and lengths come from it."""
    format: Literal["azure-csv", "mooncake-jsonl", "requests-jsonl"]
    """``azure-csv`` (Azure LLM inference trace: TIMESTAMP, ContextTokens, GeneratedTokens),
    ``mooncake-jsonl`` (timestamp in ms, input_length, output_length, and the hash_ids of
    512-token prompt blocks) or ``requests-jsonl`` (pagesim's own, as ``pagesim import-run``
    writes it: arrival_s, input_tokens, output_tokens and an optional prompt key; rows with
    the same key send the same prompt)."""
    path: str
    """The trace file, relative to the scenario file."""
    time_scale: float = Field(default=1.0, gt=0)
    """Multiplies every arrival offset: 0.5 replays twice as fast, 2 half as fast."""
    hash_block_tokens: int | None = Field(default=None, ge=1, le=65536)
    """Tokens behind each of a row's ``hash_ids`` (default: Mooncake's 512 for
    ``mooncake-jsonl``, 16 for ``requests-jsonl``; ``pagesim import-run`` writes the
    replay's block size)."""

    @model_serializer(mode="wrap")
    def _leave_out_default_block(self, handler) -> dict[str, Any]:
        return drop_unset(handler(self), {"hash_block_tokens": None})

    @property
    def block_tokens(self) -> int:
        """``hash_block_tokens``, or the format's default."""
        if self.hash_block_tokens is not None:
            return self.hash_block_tokens
        return MOONCAKE_BLOCK_TOKENS if self.format == "mooncake-jsonl" else 16

    @field_validator("path")
    @classmethod
    def _readable_trace(cls, value: str, info: ValidationInfo) -> str:
        resolved = resolve_existing_file(value, info)
        if "format" in info.data:  # a bad format is reported on its own field
            load_trace(resolved, info.data["format"])
        return value

    @model_validator(mode="after")
    def _finite_arrivals(self) -> TraceArrival:
        last = float(self.trace().arrival_s.max()) * self.time_scale
        if not np.isfinite(last):
            raise ValueError(
                f"time_scale {self.time_scale:g} puts the trace's last arrival "
                f"({float(self.trace().arrival_s.max()):.3g} s after the first) beyond "
                "any finite time"
            )
        return self

    def trace(self) -> Trace:
        return load_trace(self.resolved_path, self.format)


def _poisson_by_default(value: Any) -> Any:
    """``arrival: {rate_rps: 5}`` (or a ``--set`` creating it) means Poisson."""
    if isinstance(value, dict) and "kind" not in value:
        return {"kind": "poisson", **value}
    return value


ArrivalSpec = Annotated[
    PoissonArrival | GammaArrival | ConstantArrival | StagedArrival | TraceArrival,
    Field(discriminator="kind"),
    BeforeValidator(_poisson_by_default),
]
