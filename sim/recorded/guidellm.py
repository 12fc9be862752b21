"""GuideLLM's benchmark report (``benchmarks.json``, report schema version 2, as
vllm-project/guidellm writes it): ``pagesim import-run guidellm FILE [--benchmark I]``.

A report holds one benchmark per strategy it ran (a sweep holds several): ``--benchmark
I`` picks one (0 first; a report of one needs none). Of a benchmark's requests
(``requests.successful``, ``errored`` and ``incomplete``), each gives, as GuideLLM
serialises its ``GenerativeRequestStats`` (``src/guidellm/schemas/request_stats.py``):

=========================  ========================================================
field                      meaning
=========================  ========================================================
request_start_time         the client's send (epoch seconds)
request_end_time           the response's end
time_to_first_token_ms     send to first token
prompt_tokens              prompt tokens, as the server's usage counted them
output_tokens              output tokens (usage, else the streamed iterations)
cached_tokens              prompt tokens the server reported cached (may be null)
request_args               the request's arguments as JSON: its body's ``prompt`` or
                           ``messages`` give prompt identity (sim.recorded.prefixes)
info.error                 an errored request's message
=========================  ========================================================

Arrivals are the sends, first at 0 (``clock: client``). The strategy
(``config.strategy.type_``) is noted: for ``synchronous``, ``concurrent`` and
``throughput`` the client sent when a slot freed, so the replay, which sends at the
recorded instants, keeps the load the engine saw but not the feedback. Where requests
report cached tokens, ``validate --observed`` sets their share of the prompt tokens (the
recording's prefix cache hit rate) beside the replay's.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from pydantic import Field

from sim.recorded.fields import Count, Elapsed, Published, Seconds
from sim.recorded.files import Record, parse, read_json, read_yaml, sha256_of
from sim.recorded.prefixes import (
    DEFAULT_BLOCK_TOKENS,
    payload_text,
    shareable_note,
    text_blocks,
)
from sim.recorded.run import EngineConfig, RecordedRequests, RecordedRun, RecordError

#: Strategies whose sends waited for a free slot (closed loop).
_CLOSED_LOOP = ("synchronous", "concurrent", "throughput")


class Info(Record):
    error: str | None = None


class GuideRequest(Record):
    """One request's stats (module doc)."""

    request_start_time: Seconds | None = None
    request_end_time: Seconds
    time_to_first_token_ms: Elapsed | None = None
    prompt_tokens: Count | None = None
    output_tokens: Count | None = None
    cached_tokens: Count | None = None
    request_args: str | None = None
    info: Info | None = None


class Breakdown(Record):
    successful: list[GuideRequest] = Field(default_factory=list)
    errored: list[GuideRequest] = Field(default_factory=list)
    incomplete: list[GuideRequest] = Field(default_factory=list)


class Strategy(Record):
    type_: str = "unknown"
    rate: Published = None


class BenchmarkConfig(Record):
    strategy: Strategy | None = None


class Benchmark(Record):
    config: BenchmarkConfig | None = None
    requests: Breakdown


class Report(Record):
    benchmarks: list[Benchmark] = Field(min_length=1)


def read_run(
    path: Path,
    *,
    engine: EngineConfig,
    model: str | None,
    hardware: str | None,
    benchmark: int | None = None,
) -> RecordedRun:
    """The recorded run of one benchmark of GuideLLM's report ``path`` (module doc)."""
    files = {str(path): sha256_of(path)}
    raw = read_yaml(path) if path.suffix in (".yaml", ".yml") else read_json(path)
    report = parse(Report, raw, str(path))
    chosen = _chosen(report, benchmark, str(path))
    strategy = (chosen.config.strategy if chosen.config else None) or Strategy()
    where = f"{path}: benchmarks[{report.benchmarks.index(chosen)}]"
    rows = [(r, "") for r in chosen.requests.successful]
    rows += [(r, _failure(r, "errored")) for r in chosen.requests.errored]
    rows += [(r, "incomplete") for r in chosen.requests.incomplete]
    if not rows:
        raise RecordError(f"{where}: requests: none recorded")
    block = engine.block_size or DEFAULT_BLOCK_TOKENS
    requests = _columns(rows, where, block)
    notes = [
        f"strategy {strategy.type_}"
        + (f" at {strategy.rate:g}" if strategy.rate else "")
        + ": arrivals are the client's sends (first at 0)"
    ]
    if strategy.type_ in _CLOSED_LOOP:
        notes.append(
            f"a {strategy.type_} client sent when a slot freed: the replay sends at "
            "the recorded instants (the engine's load, not the feedback)"
        )
    if requests.prefix_blocks is not None:
        notes.append(shareable_note(requests, "prompt text (request_args)"))
    return RecordedRun(
        format="guidellm",
        source=str(path),
        model=model,
        hardware=hardware,
        engine=engine,
        requests=requests,
        notes=tuple(notes),
        files=files,
    )


def _chosen(report: Report, benchmark: int | None, where: str) -> Benchmark:
    count = len(report.benchmarks)
    if benchmark is None and count > 1:
        kinds = ", ".join(
            f"{i}: {(b.config.strategy.type_ if b.config and b.config.strategy else '?')}"
            for i, b in enumerate(report.benchmarks)
        )
        raise RecordError(f"{where}: {count} benchmarks ({kinds}); choose one with --benchmark I")
    index = benchmark or 0
    if not 0 <= index < count:
        raise RecordError(
            f"{where}: --benchmark: {index}: the report has benchmarks 0 to {count - 1}"
        )
    return report.benchmarks[index]


def _failure(request: GuideRequest, kind: str) -> str:
    message = (request.info.error if request.info else None) or kind
    return message.strip().splitlines()[-1][:80] if message.strip() else kind


def _columns(rows: list[tuple[GuideRequest, str]], where: str, block: int) -> RecordedRequests:
    send, first, end, prompt, output, cached, texts = [], [], [], [], [], [], []
    for i, (r, error) in enumerate(rows):
        if r.request_start_time is None:
            raise RecordError(f"{where}: request {i}: request_start_time: missing")
        if not error and (
            r.prompt_tokens is None or r.output_tokens is None or r.time_to_first_token_ms is None
        ):
            raise RecordError(
                f"{where}: request {i}: a successful request without "
                "prompt_tokens, output_tokens or time_to_first_token_ms"
            )
        if r.request_end_time < r.request_start_time:
            raise RecordError(f"{where}: request {i}: request_end_time: before its start")
        if r.cached_tokens is not None and r.cached_tokens > (r.prompt_tokens or 0):
            raise RecordError(
                f"{where}: request {i}: cached_tokens: {r.cached_tokens:,}, more than its "
                f"{r.prompt_tokens or 0:,} prompt tokens"
            )
        send.append(r.request_start_time)
        ok = not error
        first.append(r.request_start_time + r.time_to_first_token_ms / 1e3 if ok else np.nan)
        end.append(r.request_end_time if ok else np.nan)
        prompt.append(r.prompt_tokens or 0)
        output.append(r.output_tokens or 0)
        cached.append(-1 if r.cached_tokens is None else r.cached_tokens)
        texts.append(_prompt_text(r.request_args))
    origin = min(send)
    shift = lambda values: np.asarray(values, dtype=np.float64) - origin  # noqa: E731
    requests = RecordedRequests(
        shift(send),
        shift(first),
        shift(end),
        np.asarray(prompt, dtype=np.int64),
        np.asarray(output, dtype=np.int64),
        np.asarray(cached, dtype=np.int64),
        tuple(error for _, error in rows),
        None,
    )
    chains = text_blocks(texts, requests.prompt_tokens, block)
    if chains is not None:
        requests = requests._replace(prefix_blocks=chains, prefix_block_tokens=block)
    return requests


def _prompt_text(arguments: str | None) -> str | None:
    """The prompt of a request's arguments (JSON: its ``body``)."""
    try:
        return payload_text((json.loads(arguments) or {}).get("body")) if arguments else None
    except (ValueError, AttributeError):
        return None
