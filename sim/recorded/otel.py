"""vLLM's request spans, as an OpenTelemetry export: ``pagesim import-run otel FILE``.

vLLM started with ``--otlp-traces-endpoint`` emits one span a finished request, named
``llm_request`` (vLLM 0.33.0: ``vllm/v1/engine/output_processor.py``,
``OutputProcessor.do_tracing``; the attribute names in ``vllm/tracing``), starting at the
request's arrival (``time.time()`` in the engine's front end, epoch nanoseconds) with,
in seconds unless said:

===================================  ==============================================
attribute                            meaning
===================================  ==============================================
gen_ai.latency.time_to_first_token   arrival to first token
gen_ai.latency.e2e                   arrival to the output of its last step
gen_ai.latency.time_in_queue         queued to first scheduled (engine clock)
gen_ai.usage.prompt_tokens           prompt tokens (count)
gen_ai.usage.completion_tokens       output tokens (count)
gen_ai.request.id                    the request's id
===================================  ==============================================

FILE is what a collector writes: OTLP/JSON, one ``ExportTraceServiceRequest``
(``{"resourceSpans": [{"scopeSpans": [{"spans": [...]}]}]}``) a line (the ``file``
exporter) or one for the whole file. Spans of other names are skipped; 64-bit integers
may be strings, as OTLP/JSON writes them. Arrivals are the spans' starts, shifted so the
first is 0, on the engine's clock (``clock: engine``: no client overhead). Engine
arguments come from ``--engine-log`` (its ``non-default args`` line) or ``--metadata``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BeforeValidator, Field

from sim.recorded.fields import Elapsed, not_a_flag
from sim.recorded.files import Record, parse, read_json, read_json_lines, sha256_of
from sim.recorded.run import EngineConfig, RecordedRequests, RecordedRun, RecordError

#: A token count as an OTLP attribute holds it: OTLP's JSON writes 64-bit integers as
#: texts (``{"intValue": "300"}``), so a text of digits is a count here.
Count = Annotated[int, BeforeValidator(not_a_flag), Field(ge=0, le=1 << 40)]

#: The span vLLM emits for each finished request.
SPAN_NAME = "llm_request"
_TTFT = "gen_ai.latency.time_to_first_token"
_E2E = "gen_ai.latency.e2e"
_PROMPT = "gen_ai.usage.prompt_tokens"
_OUTPUT = "gen_ai.usage.completion_tokens"


class AnyValue(Record):
    stringValue: str | None = None
    intValue: int | str | None = None
    doubleValue: float | int | str | None = None
    boolValue: bool | None = None

    def value(self) -> Any:
        for v in (self.doubleValue, self.intValue, self.stringValue, self.boolValue):
            if v is not None:
                return v
        return None


class KeyValue(Record):
    key: str
    value: AnyValue = Field(default_factory=AnyValue)


class Span(Record):
    name: str = ""
    startTimeUnixNano: int | str
    attributes: list[KeyValue] = Field(default_factory=list)


class ScopeSpans(Record):
    spans: list[Span] = Field(default_factory=list)


class ResourceSpans(Record):
    scopeSpans: list[ScopeSpans] = Field(default_factory=list)


class Export(Record):
    """One ExportTraceServiceRequest as OTLP/JSON."""

    resourceSpans: list[ResourceSpans] = Field(default_factory=list)


class RequestSpan(Record):
    """What a replay reads of one ``llm_request`` span (module doc)."""

    start_ns: Annotated[int, BeforeValidator(not_a_flag), Field(ge=0, lt=1 << 63)]
    ttft_s: Elapsed
    e2e_s: Elapsed
    prompt_tokens: Count
    output_tokens: Count


def read_run(
    path: Path, *, engine: EngineConfig, model: str | None, hardware: str | None
) -> RecordedRun:
    """The recorded run of the spans in ``path`` (module doc)."""
    files = {str(path): sha256_of(path)}
    spans = [span for export in _exports(path) for span in _spans(export)]
    requests = [_request(span, f"{path}: span {i}") for i, span in enumerate(spans)]
    if not requests:
        raise RecordError(
            f"{path}: no {SPAN_NAME!r} span (vLLM with --otlp-traces-endpoint "
            "writes one a finished request)"
        )
    return RecordedRun(
        format="otel",
        source=str(path),
        model=model,
        hardware=hardware,
        engine=engine,
        requests=_columns(requests),
        clock="engine",
        files=files,
        notes=(
            "arrivals are the spans' starts (the engine's front end), first at 0; TTFT "
            "and E2E as vLLM measured them from there",
        ),
    )


def _exports(path: Path) -> list[tuple[str, Any]]:
    """(where, ExportTraceServiceRequest) of the file: one object, or one a line."""
    try:
        return [(str(path), read_json(path))]
    except RecordError:
        return [(f"{path}:{line}", row) for line, row in read_json_lines(path)]


def _spans(export: tuple[str, Any]) -> list[tuple[str, Span]]:
    where, value = export
    parsed = parse(Export, value, where)
    return [
        (where, span)
        for resource in parsed.resourceSpans
        for scope in resource.scopeSpans
        for span in scope.spans
        if span.name == SPAN_NAME
    ]


def _request(item: tuple[str, Span], at: str) -> RequestSpan:
    where, span = item
    attributes = {kv.key: kv.value.value() for kv in span.attributes}
    missing = [key for key in (_TTFT, _E2E, _PROMPT, _OUTPUT) if attributes.get(key) is None]
    if missing:
        raise RecordError(f"{where}: {SPAN_NAME} span: {missing[0]}: missing")
    request = parse(
        RequestSpan,
        {
            "start_ns": span.startTimeUnixNano,
            "ttft_s": attributes[_TTFT],
            "e2e_s": attributes[_E2E],
            "prompt_tokens": attributes[_PROMPT],
            "output_tokens": attributes[_OUTPUT],
        },
        f"{where}: {SPAN_NAME} span",
    )
    if request.e2e_s < request.ttft_s:
        raise RecordError(
            f"{where}: {SPAN_NAME} span: {_E2E}: {request.e2e_s!r} s, before its "
            f"{_TTFT} of {request.ttft_s!r} s"
        )
    return request


def _columns(requests: list[RequestSpan]) -> RecordedRequests:
    start = np.asarray([r.start_ns for r in requests], dtype=np.int64)
    send = (start - start.min()).astype(np.float64) / 1e9
    ttft = np.asarray([r.ttft_s for r in requests])
    e2e = np.asarray([r.e2e_s for r in requests])
    size = len(requests)
    return RecordedRequests(
        send,
        send + ttft,
        send + e2e,
        np.asarray([r.prompt_tokens for r in requests], dtype=np.int64),
        np.asarray([r.output_tokens for r in requests], dtype=np.int64),
        np.full(size, -1, dtype=np.int64),
        ("",) * size,
        None,
    )


__all__ = ["SPAN_NAME", "read_run"]
