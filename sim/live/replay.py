"""Replaying a scenario's request stream against a live endpoint, in real time.

Each request is sent at its arrival time (seconds after the replay starts), with the
scenario's prompt, ``max_tokens`` = its output length with ``ignore_eos`` (so the server
generates exactly that many tokens, as the simulator assumes), its ``n`` samples, its
priority, and its tenant as ``cache_salt`` (vLLM's per-tenant prefix-cache isolation).
Shared prefixes and session turns need nothing special: they are in the prompts.

Prompts go as token ids (``prompt: [int, ...]``, which vLLM's completions API takes),
or as text: the ids as decimal words (``"17 4 301"``), for servers that take text
only; how many tokens that text is then depends on the server's tokenizer (its
``usage.prompt_tokens`` is recorded). The chat API always sends text, in one user
message.

At most ``max_connections`` requests are in flight: a request due while all are busy
waits for one, and its send time (from which TTFT counts, as in ``vllm bench serve``)
is when it went out; the observed run reports how far sends fell behind the schedule.
At ``time_limit_s`` everything still running is cancelled and counted as unfinished.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from sim.live.client import TIME_LIMIT, Attempt, stream_request
from sim.workload.request import Request

#: The two APIs and the path each is served at.
API_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


@dataclass(frozen=True)
class ReplayOptions:
    """How to replay: where, in which API and prompt form, how many connections, and
    for how long (seconds)."""

    url: str  # the full URL of the API (see :func:`api_url`)
    model: str
    api: str = "completions"
    prompt_mode: str = "tokens"
    max_connections: int = 64
    time_limit_s: float = 600.0
    request_timeout_s: float = 60.0


def api_url(endpoint: str, api: str) -> str:
    """The URL to POST to: ``endpoint`` itself if it already ends in an API path, else
    ``endpoint`` + the API's path. Raises ValueError (one line) for a URL that is not
    ``http(s)://host[:port][/path]``."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected http://HOST[:PORT], got {endpoint!r}")
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        raise ValueError(f"the port of {endpoint!r} is not a number in 0-65535") from None
    path = parts.path.rstrip("/")
    if path.endswith(tuple(API_PATHS.values())):
        return endpoint
    return f"{parts.scheme}://{parts.netloc}{path}{API_PATHS[api]}"


def request_body(request: Request, options: ReplayOptions) -> dict[str, Any]:
    """The JSON body that asks for exactly what the simulator would serve."""
    ids = request.prompt.tolist()
    body: dict[str, Any] = {
        "model": options.model,
        "max_tokens": request.output_len,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.n != 1:
        body["n"] = request.n
    if request.priority:
        body["priority"] = request.priority
    if request.tenant:
        body["cache_salt"] = f"tenant-{request.tenant}"
    if options.api == "chat":
        body["messages"] = [{"role": "user", "content": " ".join(map(str, ids))}]
    else:
        body["prompt"] = ids if options.prompt_mode == "tokens" else " ".join(map(str, ids))
    return body


async def check_reachable(url: str, timeout_s: float = 5.0) -> str:
    """'' if something answers HTTP at ``url``'s host and port (any status counts),
    else why not, in a few words."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url) as response,
        ):
            await response.read()
    except aiohttp.ClientConnectorError as err:
        errno = err.os_error.errno
        return f"cannot connect ({os.strerror(errno) if errno else err.os_error})"
    except TimeoutError:
        return f"no answer in {timeout_s:g} s"
    except aiohttp.ClientError as err:
        return f"no HTTP answer ({type(err).__name__}: {err})"
    return ""


@dataclass
class ReplayResult:
    """Every request's :class:`Attempt`, in the order given, and the replay's wall time."""

    attempts: list[Attempt]
    wall_s: float
    timed_out: bool


def replay(
    requests: Sequence[Request],
    options: ReplayOptions,
    *,
    on_done: Callable[[int], None] | None = None,
) -> ReplayResult:
    """Send ``requests`` at their arrival times and observe them (blocking; runs its own
    asyncio loop). ``on_done(count)`` is called as requests end (a progress bar)."""
    return asyncio.run(_replay(requests, options, on_done or (lambda _: None)))


async def _replay(requests, options: ReplayOptions, on_done) -> ReplayResult:
    import aiohttp

    start = time.perf_counter()

    def clock() -> float:
        return time.perf_counter() - start

    attempts = [Attempt(r.req_id, float(r.arrival_s)) for r in requests]
    order = sorted(range(len(requests)), key=lambda i: (requests[i].arrival_s, i))
    slots = asyncio.Semaphore(options.max_connections)
    tasks: list[asyncio.Task] = []
    ended = 0
    timeout = aiohttp.ClientTimeout(
        total=None, sock_connect=options.request_timeout_s, sock_read=options.request_timeout_s
    )
    connector = aiohttp.TCPConnector(limit=options.max_connections)

    async def one(session, index: int) -> None:
        nonlocal ended
        async with slots:
            attempt = attempts[index]
            attempt.send_s = clock()
            body = request_body(requests[index], options)
            await stream_request(session, options.url, body, attempt, clock)
        ended += 1
        on_done(ended)

    async def dispatch(session) -> None:
        for index in order:
            delay = attempts[index].scheduled_s - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(session, index)))
        await asyncio.gather(*tasks)

    timed_out = False
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        try:
            await asyncio.wait_for(dispatch(session), options.time_limit_s)
        except TimeoutError:
            timed_out = True
        finally:  # the time limit, or Ctrl-C: nothing keeps running behind the caller
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    for attempt in attempts:
        if not attempt.error and not attempt.finished:
            attempt.fail(TIME_LIMIT, f"the replay's {options.time_limit_s:g} s ran out")
    return ReplayResult(attempts, clock(), timed_out)
