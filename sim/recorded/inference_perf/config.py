"""inference-perf's ``config.yaml`` (its dump of the configuration it ran): the typed
model of what a replay reads of it, the scenario ``workload`` that regenerates the run's
requests, and which replay field comes from which setting (the package doc says how
each maps).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from sim.recorded.fields import Count, Published
from sim.recorded.files import Record
from sim.recorded.run import RecordError

#: A positive finite number (a stage's rate or duration, a length's mean).
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
#: A count of prompts or groups a shared-prefix generator makes.
Prompts = Annotated[Count, Field(ge=1, le=10**6)]


class LoadStage(Record):
    rate: Positive
    duration: Positive


class Load(Record):
    type: Literal["constant", "poisson"] = "constant"
    stages: Annotated[list[LoadStage], Field(min_length=1)]
    request_timeout: Published = None


class SharedPrefix(Record):
    num_groups: Prompts
    num_prompts_per_group: Prompts
    system_prompt_len: Count
    question_len: Annotated[Count, Field(ge=1)]
    output_len: Annotated[Count, Field(ge=1)]


class LengthSpread(Record):
    """inference-perf's ``{min, max, mean, std_dev}`` of a random generator's lengths."""

    mean: Annotated[float, Field(ge=1, allow_inf_nan=False)]
    std_dev: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    min: Published = None
    max: Published = None


class Data(Record):
    type: str | None = None
    shared_prefix: SharedPrefix | None = None
    input_distribution: LengthSpread | None = None
    output_distribution: LengthSpread | None = None


class Server(Record):
    model_name: str | None = None
    ignore_eos: bool = False


class Config(Record):
    """config.yaml: inference-perf's dump of the configuration it ran."""

    load: Load
    data: Data
    server: Server | None = None


def model_name(config: Config) -> str | None:
    return config.server.model_name if config.server else None


def replay_workload(config: Config, where: str) -> tuple[dict[str, Any], int | None, list[str]]:
    """The scenario ``workload`` that regenerates the run's requests, the output length
    every request was asked for (None if it varied), and notes."""
    kind = config.load.type
    rows = [{"rate_rps": s.rate, "duration_s": s.duration} for s in config.load.stages]
    process = "poisson-count" if kind == "constant" else "poisson"
    arrival = {"kind": "stages", "process": process, "stages": rows}
    data = config.data
    ignore_eos = config.server.ignore_eos if config.server else False
    notes = [f"load.type {kind}: {process} arrivals in {len(rows)} stage(s)"]
    if data.type == "shared_prefix":
        shared = data.shared_prefix
        if shared is None:
            raise RecordError(f"{where}: data.shared_prefix: missing")
        groups, per_group = shared.num_groups, shared.num_prompts_per_group
        system, question, out = shared.system_prompt_len, shared.question_len, shared.output_len
        notes.append(
            f"shared_prefix: {groups} x {per_group} prompts ({system}-token system prompt, "
            f"{question}-token question) sent in turn"
        )
        workload = {
            "arrival": arrival,
            "input": question,
            "output": out,
            "prompts": {"distinct": groups * per_group, "order": "cycle"},
        }
        if system:
            workload["prefix"] = {"num_groups": groups, "length": system}
        return workload, (out if ignore_eos else None), notes
    if data.type in ("random", "synthetic"):
        lengths = {
            role: _distribution(getattr(data, f"{role}_distribution"), where, f"data.{role}")
            for role in ("input", "output")
        }
        fixed = lengths["output"] if isinstance(lengths["output"], int) else None
        return {"arrival": arrival, **lengths}, (fixed if ignore_eos else None), notes
    raise RecordError(
        f"{where}: data.type: expected shared_prefix, random or synthetic (the generators "
        f"a replay can regenerate), got {data.type!r}; record per-request metrics "
        "(report.request_lifecycle.per_request) to replay any other"
    )


def _distribution(spec: LengthSpread | None, where: str, field: str) -> Any:
    """inference-perf's {min, max, mean, std_dev} as a length: fixed when it cannot vary,
    else a lognormal of that mean and spread (its draws are clipped to [min, max])."""
    if spec is None:
        raise RecordError(f"{where}: {field}_distribution: missing")
    mean, spread = spec.mean, spec.std_dev
    low = spec.min if spec.min is not None else mean
    high = spec.max if spec.max is not None else mean
    if not spread or low == high:
        return max(1, round(mean))
    return {"kind": "lognormal", "mean": mean, "cv": min(spread / mean, 100.0)}


def origins(config: Config, name: str) -> dict[str, str]:
    """The replay's workload fields -> the config.yaml fields they are made from."""
    origins = {
        "workload.arrival": f"{name}: load",
        "workload.request_timeout_s": f"{name}: load.request_timeout",
        "workload.prompts": f"{name}: data.shared_prefix (num_groups x num_prompts_per_group)",
        "workload.prefix": f"{name}: data.shared_prefix",
        "workload.input": f"{name}: data",
        "workload.output": f"{name}: data",
    }
    for i in range(len(config.load.stages)):
        at = f"workload.arrival.stages[{i}]"
        origins[f"{at}.rate_rps"] = f"{name}: load.stages[{i}].rate"
        origins[f"{at}.duration_s"] = f"{name}: load.stages[{i}].duration"
    return origins
