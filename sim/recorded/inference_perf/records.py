"""inference-perf's per-request records (``per_request_lifecycle_metrics.json``): the
typed model of a record, and the requests they give (times on the client's clock, the
prompts' text as chains of blocks: sim.recorded.prefixes).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import numpy as np
from pydantic import BeforeValidator

from sim.recorded.fields import Count, Seconds
from sim.recorded.files import Record, parse
from sim.recorded.prefixes import payload_text, text_blocks
from sim.recorded.run import RecordedRequests, RecordError


def _failure_kind(value: Any) -> str:
    """A request's ``error``: null (a success), the message itself (some versions) or
    ``{error_type, ...}``; its kind, at most 80 characters ('' for a success)."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        return value[:80]
    if isinstance(value, dict):
        return str(value.get("error_type", "error"))[:80]
    raise ValueError(f"expected null, a message or an object with error_type, got {value!r}"[:120])


class RequestInfo(Record):
    output_token_times: list[Seconds] | None = None
    input_tokens: Count = 0
    output_tokens: Count = 0


class RequestRecord(Record):
    """One entry of per_request_lifecycle_metrics.json."""

    start_time: Seconds
    end_time: Seconds
    info: RequestInfo | None = None
    error: Annotated[str, BeforeValidator(_failure_kind)] = ""
    request: Any = None


def requests_of(records: Any, where: str, out_len: int | None, block: int):
    """RecordedRequests from the per-request file (prompts as chains of ``block``-token
    blocks of their text: sim.recorded.prefixes), and whether its token times are per
    SSE line (two a token)."""
    if not isinstance(records, list) or not records:
        raise RecordError(f"{where}: expected a non-empty list of request records")
    send, first, end, prompt, output, texts, errors, times = [], [], [], [], [], [], [], []
    line_pairs = []
    for i, raw in enumerate(records):
        at = f"{where}: record {i}"
        record = parse(RequestRecord, raw, at)
        start, stop = record.start_time, record.end_time
        if stop < start:
            raise RecordError(f"{at}: end_time: before start_time ({stop!r} < {start!r})")
        info = record.info or RequestInfo()
        stamps = np.asarray(info.output_token_times or [], dtype=np.float64)
        if stamps.size and (np.any(np.diff(stamps) < 0) or stamps[0] < start):
            raise RecordError(f"{at}: info.output_token_times: not increasing from start_time")
        line_pairs.append(_paired(stamps))
        send.append(start)
        end.append(stop)
        first.append(float(stamps[0]) if stamps.size else np.nan)
        times.append(stamps)
        prompt.append(info.input_tokens)
        output.append(info.output_tokens)
        texts.append(_prompt_text(record.request))
        errors.append(record.error)
    line_times = bool(line_pairs) and np.mean(line_pairs) > 0.5
    if line_times:  # keep one time a token: the data lines (even indices), not [DONE]
        times = [t[0:-2:2] if t.size >= 2 else t for t in times]
    if out_len is not None:
        output = [out_len if not e else n for n, e in zip(output, errors)]
    origin = min(send)
    shift = lambda values: np.asarray(values, dtype=np.float64) - origin  # noqa: E731
    requests = RecordedRequests(
        shift(send),
        shift(first),
        shift(end),
        np.asarray(prompt, dtype=np.int64),
        np.asarray(output, dtype=np.int64),
        np.full(len(send), -1, dtype=np.int64),
        tuple(errors),
        tuple(t - origin for t in times),
    )
    chains = text_blocks(texts, requests.prompt_tokens, block)
    if chains is not None:
        requests = requests._replace(prefix_blocks=chains, prefix_block_tokens=block)
    return requests, line_times


def _paired(stamps: np.ndarray) -> bool:
    """Whether a stream's times come two a line pair (an event's data line, then its blank
    line microseconds later): every gap from a data line to its blank one far shorter
    than the gaps between events."""
    gaps = np.diff(stamps)
    if gaps.size < 4:
        return False
    within, between = gaps[0::2], gaps[1::2]
    return bool(np.median(within) < 0.05 * max(np.median(between), 1e-12))


def _prompt_text(request: Any) -> str | None:
    """The prompt of a record's ``request`` (its payload as JSON, or the text itself)."""
    if not isinstance(request, str):
        return None
    try:
        payload = json.loads(request)
    except ValueError:
        return request
    return payload if isinstance(payload, str) else payload_text(payload)
