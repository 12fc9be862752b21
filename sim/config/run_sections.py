"""The run's own sections of a scenario: SLO targets, the run's length and seed, and the
backend that times each step."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from sim.config.errors import error_at
from sim.inputs.schema import StrictModel


class SLOSpec(StrictModel):
    """Targets for goodput: a request meets its SLO if both hold."""

    ttft_s: float = Field(default=2.0, gt=0)
    """TTFT target in seconds: from arrival to the first output token, queueing and prefill
    included."""
    tpot_s: float = Field(default=0.2, gt=0)
    """TPOT target in seconds: a request's mean time per output token after the first, (finish -
    first token) / (output tokens - 1); a one-token request always meets it."""


class SimulationSpec(StrictModel):
    """Run length (requests or simulated seconds, whichever ends first; num_requests
    defaults to 1000 when neither is given; both null replays a whole trace), the
    warm-up excluded from metrics, the seed, and a safety horizon for the SimPy clock."""

    num_requests: int | None = Field(default=None, ge=1)
    """Requests to simulate (each session turn is one; with a trace, its first rows). 1000 when
    neither this nor ``duration_s`` is given; null to end by ``duration_s`` alone, or, both null,
    to replay a whole trace."""
    duration_s: float | None = Field(default=None, gt=0)
    """Simulated seconds of arrivals: no request arrives later (those in flight still finish). With
    ``num_requests`` too, whichever ends first."""
    warmup_requests: int = Field(default=0, ge=0)
    """The first this many requests, in arrival order, are left out of every latency, goodput and
    throughput figure; fewer than ``num_requests``."""
    seed: int = Field(default=0, ge=0)
    """Seed of every random draw (arrivals, lengths, token ids, randomised policies): the same
    scenario and seed give byte-identical outputs."""
    max_sim_time_s: float = Field(default=1e6, gt=0)
    """Safety horizon in simulated seconds: the run stops there, and requests still in flight are
    reported unfinished."""

    @model_validator(mode="before")
    @classmethod
    def _default_length(cls, data: Any) -> Any:
        if isinstance(data, dict) and "num_requests" not in data and "duration_s" not in data:
            return {**data, "num_requests": 1000}
        return data

    @model_validator(mode="after")
    def _warmup_leaves_requests(self) -> SimulationSpec:
        if self.num_requests is not None and self.warmup_requests >= self.num_requests:
            raise error_at(
                "simulation.warmup_requests",
                f"expected fewer than num_requests ({self.num_requests}), "
                f"got {self.warmup_requests}",
            )
        return self


class BackendSpec(StrictModel):
    """Where step times come from: ``model`` (the cost model) or ``torch`` (run the step
    on the real paged backend and measure it)."""

    kind: Literal["model", "torch"] = "model"
    """``model``: step times come from ``cost_model`` (pure simulation); ``torch``: each step runs
    on the real paged backend (hardware in the loop) and its measured time is used."""
    device: Literal["cpu", "cuda"] = "cpu"
    """Where the torch backend runs, ``cpu`` or ``cuda``; ``backend.kind: torch`` only."""
    dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    """Element type of the torch backend's weights and KV cache; ``backend.kind: torch`` only."""
