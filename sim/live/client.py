"""One streaming request to an OpenAI-compatible endpoint, observed token by token.

:func:`stream_request` POSTs a body to ``/v1/completions`` or ``/v1/chat/completions``
with ``stream: true`` and reads the server-sent events (SSE) as they arrive, stamping
each with the caller's clock: the first token, every later token (for the inter-token
latency), the end. What went wrong, if anything, becomes one of a few *kinds* (the
keys an observed run counts), never an exception:

============================  ===========================================================
kind                          what the client saw
============================  ===========================================================
``connection refused``        no TCP connection (nothing listening, unreachable host)
``http NNN``                  the endpoint answered with status NNN (4xx or 5xx)
``malformed stream``          not an event stream, an event that is not JSON or has no
                              ``choices``, a line too long, an ``error`` event
``disconnected mid-stream``   the connection closed before ``data: [DONE]``
``timeout``                   no byte for ``timeout_s`` seconds (connect or read)
``usage disagrees``           the final ``usage`` claims what the stream cannot have
                              been: more completion tokens than ``max_tokens`` x ``n``,
                              or a count that is negative or past 2^31 - 1 (the tokens
                              that came are kept; the claim is not a measurement)
``client error``              anything else aiohttp raised (the detail says what)
============================  ===========================================================

A stream that reaches ``[DONE]`` without a token (and without a usage count of any) is
``malformed stream``: nothing was generated, so it did not finish.

A token is an event whose choice carries non-empty text (``choices[i].text`` for
completions, ``choices[i].delta.content`` for chat): servers send one per token, and
a role-only or empty first chunk is not one. If the final ``usage`` reports more
completion tokens than events came (a server that packs several tokens per event), the
count from ``usage`` is kept as the number of tokens received.

aiohttp is imported by the caller's module (sim.live.replay); this module only needs
it when a request runs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: Errors whose kind is fixed (``http NNN`` carries the status).
REFUSED = "connection refused"
MALFORMED = "malformed stream"
DISCONNECTED = "disconnected mid-stream"
TIMEOUT = "timeout"
USAGE_DISAGREES = "usage disagrees"
CLIENT_ERROR = "client error"
#: Largest token count taken from a server's usage (int32, as every count is kept).
MAX_COUNT = 2**31 - 1
#: What a request still running (or never sent) when the time limit struck is marked.
TIME_LIMIT = "unfinished at time limit"


@dataclass
class Attempt:
    """One request as the client observed it (seconds on the replay's clock; NaN for
    what did not happen). ``error`` is empty for a request that streamed to ``[DONE]``."""

    req_id: int
    scheduled_s: float  # when the scenario says it arrives
    send_s: float = math.nan  # when it went out (a connection slot was free)
    first_token_s: float = math.nan
    end_s: float = math.nan
    token_times: dict[int, list[float]] = field(default_factory=dict)  # choice -> arrivals
    completion_tokens: int | None = None  # from the final usage, when reported
    prompt_tokens: int | None = None
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens
    error: str = ""
    detail: str = ""  # free text for a person (a status line, an exception)
    bad_usage: str = ""  # a usage count that was out of range (dropped), for the error

    @property
    def finished(self) -> bool:
        return not self.error and not math.isnan(self.end_s)

    @property
    def events(self) -> int:
        """Token events received, all choices together."""
        return sum(len(times) for times in self.token_times.values())

    @property
    def tokens_received(self) -> int:
        return max(self.events, self.completion_tokens or 0)

    def fail(self, kind: str, detail: str = "") -> None:
        """Record the first failure only (a later one is a consequence of it)."""
        if not self.error:
            self.error, self.detail = kind, detail[:200]


class _BadStream(Exception):
    """The stream broke the protocol; its message is the detail."""


async def stream_request(
    session, url: str, body: dict[str, Any], attempt: Attempt, clock: Callable[[], float]
) -> None:
    """POST ``body`` to ``url`` and read its event stream into ``attempt`` (mutated).
    Never raises for what the endpoint does (see the module's table of kinds); only
    cancellation (the replay's time limit) propagates."""
    import aiohttp
    import aiohttp.http_exceptions

    try:
        async with session.post(url, json=body) as response:
            if response.status >= 400:
                text = (await response.text(errors="replace"))[:200]
                attempt.fail(f"http {response.status}", text)
                return
            kind = response.headers.get("Content-Type", "")
            if "text/event-stream" not in kind:
                attempt.fail(MALFORMED, f"Content-Type {kind!r}, expected text/event-stream")
                return
            done = await _read_events(response.content, attempt, clock)
            if not done:
                attempt.fail(DISCONNECTED, "the stream ended before data: [DONE]")
                return
            if not attempt.events and not attempt.completion_tokens:
                attempt.fail(MALFORMED, "data: [DONE] before any token")
                return
            _check_usage(attempt, body)
            attempt.end_s = clock()
    except _BadStream as err:
        attempt.fail(MALFORMED, str(err))
    except aiohttp.ClientConnectorError as err:
        attempt.fail(REFUSED, str(err))
    except (TimeoutError, aiohttp.ServerTimeoutError) as err:
        attempt.fail(TIMEOUT, str(err) or type(err).__name__)
    except (
        aiohttp.ClientPayloadError,
        aiohttp.ServerDisconnectedError,
        aiohttp.ClientOSError,
    ) as err:  # noqa: E501
        attempt.fail(DISCONNECTED, str(err) or type(err).__name__)
    except aiohttp.ClientError as err:
        attempt.fail(CLIENT_ERROR, f"{type(err).__name__}: {err}")
    except ValueError as err:  # aiohttp's "Line is too long" (LineTooLong)
        attempt.fail(MALFORMED, str(err))
    except aiohttp.http_exceptions.HttpProcessingError as err:  # LineTooLong, a bad header
        attempt.fail(MALFORMED, f"the response cannot be parsed: {str(err)[:100]}")


def _check_usage(attempt: Attempt, body: dict[str, Any]) -> None:
    """Drop a usage claim the stream contradicts, and count it as its own kind."""
    asked = body.get("max_tokens")
    samples = body.get("n") or 1
    claimed = attempt.completion_tokens
    if attempt.bad_usage:
        attempt.fail(USAGE_DISAGREES, attempt.bad_usage)
    elif isinstance(asked, int) and claimed is not None and claimed > asked * samples:
        attempt.completion_tokens = None
        attempt.fail(USAGE_DISAGREES, f"completion_tokens {claimed} for max_tokens {asked}")


async def _read_events(stream, attempt: Attempt, clock: Callable[[], float]) -> bool:
    """Read SSE events until ``[DONE]`` (True) or the end of the stream (False).

    An event is its ``data:`` lines joined by newlines, dispatched at a blank line (the
    SSE rule); comments (``:``) and other fields (``event:``, ``id:``) are skipped."""
    data: list[str] = []
    while True:
        raw = await stream.readline()
        if not raw:
            return False  # an unfinished event at the end of the stream is dropped (SSE)
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if line:
            if line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
            continue
        if not data:
            continue
        payload, data = "\n".join(data), []
        if payload.strip() == "[DONE]":
            return True
        _take_event(payload, attempt, clock())


def _take_event(payload: str, attempt: Attempt, now: float) -> None:
    """One JSON event: token arrivals per choice, and the usage when it comes."""
    try:
        event = json.loads(payload)
    except json.JSONDecodeError:
        raise _BadStream(f"an event is not JSON: {payload[:60]!r}") from None
    if not isinstance(event, dict):
        raise _BadStream(f"an event is not a JSON object: {payload[:60]!r}")
    if "error" in event:
        raise _BadStream(f"the server sent an error event: {str(event['error'])[:120]}")
    choices = event.get("choices")
    if not isinstance(choices, list):
        raise _BadStream(f"an event has no choices list: {payload[:60]!r}")
    for choice in choices:
        if not isinstance(choice, dict):
            raise _BadStream(f"a choice is not a JSON object: {payload[:60]!r}")
        if _text_of(choice):
            index = choice.get("index", 0)
            attempt.token_times.setdefault(index if isinstance(index, int) else 0, []).append(now)
            if math.isnan(attempt.first_token_s):
                attempt.first_token_s = now
    usage = event.get("usage")
    if isinstance(usage, dict):
        attempt.completion_tokens = _count(usage, "completion_tokens", attempt)
        attempt.prompt_tokens = _count(usage, "prompt_tokens", attempt)
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            attempt.cached_tokens = _count(details, "cached_tokens", attempt)


def _text_of(choice: dict) -> str:
    text = choice.get("text")
    if text is None and isinstance(choice.get("delta"), dict):
        text = choice["delta"].get("content")
    return text if isinstance(text, str) else ""


def _count(usage: dict, key: str, attempt: Attempt) -> int | None:
    """``usage[key]`` as a count; None if absent or not an integer, and noted in
    ``attempt.bad_usage`` if an integer out of range (negative, past MAX_COUNT)."""
    value = usage.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    if not 0 <= value <= MAX_COUNT:
        attempt.bad_usage = attempt.bad_usage or f"usage {key} {str(value)[:40]}"
        return None
    return value
