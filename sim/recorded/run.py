"""A recorded run of a real serving engine, as every importer returns it.

An importer (one module per format) reads what a benchmark client or an engine wrote and
returns a :class:`RecordedRun`: the engine's settings, the model and GPU it ran on, and
either each request's timings (:class:`RecordedRequests`) or only the per-stage figures
the client published (:class:`StageFigures`), or both. Nothing here knows a format.

Times are seconds. Request times are on the run's own clock, shifted so the first send
is 0 (each format's module says which clock it read and how it is aligned).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, NamedTuple

import numpy as np
from pydantic import Field
from pydantic.dataclasses import dataclass as typed_dataclass

from sim.inputs.user_errors import UserError
from sim.recorded.fields import Count, Size

#: The latency metrics a recorded run may carry, each with its mean and quantiles.
METRICS = ("ttft_s", "tpot_s", "itl_s", "e2e_s")
QUANTILES = ("mean", "p50", "p90", "p99")


class RecordError(UserError, ValueError):
    """A recorded file that cannot be read as its format says; the message is one line:
    ``file:line: field: expected ...``."""


class RecordedRequests(NamedTuple):
    """Per-request columns (float64 seconds, int64 counts; NaN or -1 where not recorded).

    ``send_s``: when the client sent it; ``first_token_s`` / ``end_s``: its first token
    and its end; ``prompt_tokens`` / ``output_tokens``: lengths as the engine counted
    them where the format says so; ``cached_tokens``: prompt tokens the engine reported
    cached (-1 unknown); ``error``: '' for a success, else the failure's kind;
    ``token_times``: per request, every token's arrival (None if not recorded);
    ``prefix_blocks``: per request, an id for each of its blocks of
    ``prefix_block_tokens`` tokens, equal where two prompts agree from their start to
    that block's end (sim.recorded.prefixes; None where the recording has neither token
    ids nor text: every prompt is then its own)."""

    send_s: np.ndarray
    first_token_s: np.ndarray
    end_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    cached_tokens: np.ndarray
    error: tuple[str, ...]
    token_times: tuple[np.ndarray, ...] | None
    prefix_blocks: tuple[np.ndarray, ...] | None = None
    prefix_block_tokens: int = 16

    @property
    def count(self) -> int:
        return int(self.send_s.shape[0])


@typed_dataclass(frozen=True)
class StageFigures:
    """What a client published for one load stage (or the whole run: ``index`` -1):
    ``latency[metric][quantile]`` in seconds (metric in :data:`METRICS`, quantile in
    :data:`QUANTILES`; absent where not published), the requests sent and failed, the
    asked rate and duration, and the throughputs."""

    index: Annotated[int, Field(ge=-1)]
    rate_rps: float | None
    duration_s: float | None
    sent: Count
    failed: Count
    latency: dict[str, dict[str, float]]
    throughput_rps: float | None = None
    output_tok_s: float | None = None
    prompt_tokens_p50: float | None = None


#: A short name (an engine, a version, a dtype).
_Name = Annotated[str, Field(min_length=1, max_length=100)]
#: Weights' dtype as vLLM's --dtype names it (auto: the model config's torch_dtype).
WEIGHT_DTYPE_BYTES = {
    "float16": 2,
    "half": 2,
    "fp16": 2,
    "bfloat16": 2,
    "bf16": 2,
    "float32": 4,
    "float": 4,
    "fp32": 4,
}
_Dtype = Literal[("auto", *WEIGHT_DTYPE_BYTES)]
#: A fraction of GPU memory: (0, 1] (vllm bench --metadata writes it as text: "0.9").
_Fraction = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]


@typed_dataclass(frozen=True)
class EngineConfig:
    """The engine settings a replay needs, in vLLM's names (None: not recorded, the
    engine's default applies; :mod:`sim.recorded.engine_args` fills those in). Typed:
    construction validates each value (pydantic's ValidationError; text such as "4",
    "0.9" or "true" is read as the number or flag it spells)."""

    engine: _Name = "vllm"
    version: _Name | None = None
    max_num_seqs: Size | None = None
    max_num_batched_tokens: Size | None = None
    max_model_len: Size | None = None
    block_size: Size | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    tensor_parallel_size: Size | None = None
    dtype: _Dtype | None = None
    kv_cache_dtype: _Name | None = None
    gpu_memory_utilization: _Fraction | None = None
    num_gpu_blocks: Size | None = None
    """As the engine logged it ("# GPU blocks: N"); vLLM keeps one of them as its null
    block, so N - 1 hold KV."""
    cpu_offload_gib: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    enable_expert_parallel: bool | None = None
    """vLLM's --enable-expert-parallel (with one data-parallel rank: ``expert_parallel``)."""


@dataclass(frozen=True)
class RecordedRun:
    """One recorded run: where it came from, the deployment, and what it measured.

    ``workload`` is the scenario ``workload`` section that regenerates its requests when
    they were not recorded one by one (a client's generator settings), else None (the
    replay is a trace of ``requests``). ``notes`` say what was converted or assumed."""

    format: str
    source: str
    model: str | None
    hardware: str | None
    engine: EngineConfig
    requests: RecordedRequests | None = None
    stages: tuple[StageFigures, ...] = ()
    summary: StageFigures | None = None
    workload: dict[str, Any] | None = None
    request_timeout_s: float | None = None
    num_requests: int | None = None
    """How many requests the replay of ``workload`` sends (None: as its stages say)."""
    clock: str = "client"
    """Where the request times were read: ``client`` (a benchmark client: TTFT and E2E
    include the HTTP front end) or ``engine`` (the engine's own timestamps)."""
    notes: tuple[str, ...] = ()
    series: dict[str, list[float]] | None = None
    """The engine's own time series where it logged one (``t`` in seconds and, at each,
    ``running`` and ``waiting`` requests and ``gen_tok_s`` generated tokens a second)."""
    files: dict[str, str] = field(default_factory=dict)
    """Each file read -> its sha256, so a corpus entry names exactly what it came from."""
    hardware_guessed: bool = False
    """The recording names no GPU and ``hardware`` is the user's (sim.recorded.gpu_check
    then says which preset its decode speed fits)."""
    prefix_hit_rate: float | None = None
    """The engine's own prefix cache hit rate where it logged one (a fraction;
    :mod:`sim.recorded.engine_log` says over which requests), else None."""
    origins: dict[str, str] = field(default_factory=dict)
    """A field of the replay's scenario (a dotted path, or the start of one) -> the
    recorded field it was made from (``config.yaml: load.stages[0].rate``), so a replay
    that is refused names what the recording said. Engine arguments are named by
    :data:`sim.recorded.engine_args.SCENARIO_FIELDS`."""
