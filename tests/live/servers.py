"""Small HTTP servers on a loopback port, for the tests of ``pagesim observe``.

:class:`Loopback` runs an aiohttp app on 127.0.0.1, port 0 (a free one), in a thread
with its own event loop, for the length of a ``with`` block. The handlers below are
endpoints that misbehave in one way each; :func:`good_stream` behaves (one event per
token, the usage, ``[DONE]``).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading

from aiohttp import web


class Loopback:
    """``with Loopback(handler) as server:`` serves ``handler`` for every POST and GET
    at ``server.url`` (http://127.0.0.1:PORT)."""

    def __init__(self, handler):
        self.handler = handler
        self.url = ""
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handler)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    def __enter__(self) -> Loopback:
        self._thread.start()
        assert self._ready.wait(10), "the test server did not start"
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _event(text: str, index: int = 0) -> bytes:
    body = {"choices": [{"index": index, "text": text, "finish_reason": None}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def _open(request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    return response


async def good_stream(request):
    """A well-behaved endpoint: as many tokens as asked (a GET gets 200)."""
    if request.method != "POST":
        return web.Response(text="ok")
    body = await request.json()
    response = await _open(request)
    for i in range(body["max_tokens"]):
        await response.write(_event(f" {i}"))
        await asyncio.sleep(0.002)
    usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": body["max_tokens"]}
    await response.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode())
    await response.write(b"\n\ndata: [DONE]\n\n")
    return response


async def server_error(request):
    """Every POST is an HTTP 500."""
    if request.method != "POST":
        return web.Response(text="ok")
    return web.json_response({"error": {"message": "boom"}}, status=500)


async def stops_mid_stream(request):
    """Two tokens, then the connection is dropped."""
    if request.method != "POST":
        return web.Response(text="ok")
    response = await _open(request)
    await response.write(_event(" 1") + _event(" 2"))
    await asyncio.sleep(0.01)
    request.transport.close()
    return response


async def malformed_sse(request):
    """A token, then an event that is not JSON."""
    if request.method != "POST":
        return web.Response(text="ok")
    response = await _open(request)
    await response.write(_event(" 1") + b"data: {this is not json\n\n")
    await response.write(b"data: [DONE]\n\n")
    return response


async def never_answers(request):
    """Holds every POST without a byte for 2 s (past a short request timeout)."""
    if request.method != "POST":
        return web.Response(text="ok")
    await asyncio.sleep(2.0)
    return web.Response(text="too late")


async def _tokens_then(request, usage: dict | None, tokens: int | None = None):
    body = await request.json()
    response = await _open(request)
    for i in range(body["max_tokens"] if tokens is None else tokens):
        await response.write(_event(f" {i}"))
    if usage is not None:
        await response.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode())
        await response.write(b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    return response


async def claims_a_billion_tokens(request):
    """Streams what was asked, then claims 10^9 completion tokens in its usage."""
    if request.method != "POST":
        return web.Response(text="ok")
    return await _tokens_then(request, {"prompt_tokens": 4, "completion_tokens": 10**9})


async def claims_absurd_counts(request):
    """Streams what was asked; its usage counts are 10^30 and negative."""
    if request.method != "POST":
        return web.Response(text="ok")
    usage = {
        "prompt_tokens": -3,
        "completion_tokens": 10**30,
        "prompt_tokens_details": {"cached_tokens": 10**30},
    }
    return await _tokens_then(request, usage)


async def done_without_a_token(request):
    """``data: [DONE]`` straight away: no token, no usage."""
    if request.method != "POST":
        return web.Response(text="ok")
    return await _tokens_then(request, None, tokens=0)


async def ten_megabyte_line(request):
    """A token, then one event line of 10 MB."""
    if request.method != "POST":
        return web.Response(text="ok")
    response = await _open(request)
    await response.write(_event(" 1"))
    await response.write(b"data: " + b"x" * (10 << 20) + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    return response
