"""The HTTP side of ``pagesim serve``: an aiohttp app with OpenAI's completion APIs over
an :class:`~sim.live.driver.EngineDriver`, and its Prometheus page.

Routes: ``POST /v1/completions`` and ``POST /v1/chat/completions`` (sim.live.api says
what a body may hold), ``GET /v1/models``, ``GET /health``, ``GET /metrics``.

Each request gets an asyncio queue; the engine thread's events (tokens, done, failed)
are handed to the loop in one call per step (``call_soon_threadsafe``) and routed to the
queues. A streamed answer opens its event stream at its first event, so a request the
engine rejects (it can never fit the KV pool, say) is still a plain HTTP 400 with the
reason. A client that goes away stops getting events, but its request runs to the end:
the engine has no way to cancel one.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import numpy as np

from sim.live.api import BadRequest, Chunks, error_body, parse, token_text, usage_of
from sim.live.driver import token_ids
from sim.workload.request import Request


def _sse(event: Any) -> bytes:
    return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"


class Server:
    """The app's state: the driver, the streams in flight, the metrics."""

    def __init__(self, scenario, model_name: str, metrics):
        self.scenario = scenario
        self.model_name = model_name
        self.metrics = metrics
        self.driver = None  # attached once built (it needs :meth:`publish`)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.streams: dict[int, asyncio.Queue] = {}
        self.failed = ""
        self.stopped = asyncio.Event()

    def attach(self, driver) -> None:
        self.driver = driver

    # -- from the engine thread ----------------------------------------------------------
    def publish(self, events: list[tuple]) -> None:
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._dispatch, events)

    def _dispatch(self, events: list[tuple]) -> None:
        for event in events:
            if event[0] == "failed":
                self.failed = event[1]
                for queue in self.streams.values():
                    queue.put_nowait(event)
                self.stopped.set()
                continue
            req_id = event[1] if event[0] == "tokens" else event[1].req_id
            queue = self.streams.get(req_id)
            if queue is not None:
                queue.put_nowait(event)

    # -- the app -------------------------------------------------------------------------
    def app(self):
        from aiohttp import web

        async def started(app) -> None:
            self.loop = asyncio.get_running_loop()

        app = web.Application()
        app.on_startup.append(started)
        app.router.add_post("/v1/completions", lambda r: self.complete(r, chat=False))
        app.router.add_post("/v1/chat/completions", lambda r: self.complete(r, chat=True))
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.prometheus)
        return app

    async def models(self, request):
        from aiohttp import web

        model = {
            "id": self.model_name,
            "object": "model",
            "owned_by": "pagesim",
            "max_model_len": self.scenario.model.max_model_len,
        }
        return web.json_response({"object": "list", "data": [model]})

    async def health(self, request):
        from aiohttp import web

        return web.Response(status=503 if self.failed else 200, text=self.failed)

    async def prometheus(self, request):
        from aiohttp import web

        body, kind = self.metrics.render()
        return web.Response(body=body, headers={"Content-Type": kind})

    async def complete(self, request, *, chat: bool):
        from aiohttp import web

        if self.failed:
            message = f"the engine stopped: {self.failed}"
            return web.json_response(error_body(message, "ServiceUnavailable", 503), status=503)
        try:
            body = await request.json()
        except (ValueError, RecursionError) as err:
            # ValueError: not JSON, not UTF-8, an integer of more than 4,300 digits;
            # RecursionError: arrays nested thousands deep.
            why = "nested too deep" if isinstance(err, RecursionError) else str(err)[:80]
            return web.json_response(error_body(f"the body is not JSON: {why}"), status=400)
        model = self.scenario.model
        try:
            ask = parse(
                body, chat=chat, vocab_size=model.vocab_size, max_model_len=model.max_model_len
            )
        except BadRequest as err:
            return web.json_response(error_body(str(err)), status=400)
        driver = self.driver
        req_id = driver.next_req_id()
        queue: asyncio.Queue = asyncio.Queue()
        self.streams[req_id] = queue
        prompt = np.asarray(ask.prompt, dtype=np.int32)
        driver.submit(
            Request(
                req_id,
                driver.now(),
                prompt,
                ask.max_tokens,
                tenant=ask.tenant,
                priority=ask.priority,
                n=ask.n,
            )
        )
        chunks = Chunks(req_id, self.model_name, chat)
        try:
            if ask.stream:
                return await self._stream(request, queue, ask, chunks)
            return await self._whole(queue, ask, chunks)
        finally:
            self.streams.pop(req_id, None)

    def _text(self, event: tuple) -> list[str]:
        _, req_id, sample, first, count = event
        seed, vocab = self.scenario.simulation.seed, self.scenario.model.vocab_size
        return [token_text(t) for t in token_ids(seed, vocab, req_id, sample, first, count)]

    @staticmethod
    def _refusal(event: tuple):
        """The HTTP answer to a request that ended before its first token."""
        from aiohttp import web

        if event[0] == "failed":
            body = error_body(f"the engine stopped: {event[1]}", "InternalServerError", 500)
            return web.json_response(body, status=500)
        reason = event[1].rejected_reason
        return web.json_response(error_body(f"rejected: {reason}"), status=400)

    async def _stream(self, request, queue: asyncio.Queue, ask, chunks: Chunks):
        from aiohttp import web

        response = None
        try:
            while True:
                event = await queue.get()
                ended = event[0] == "failed" or (event[0] == "done" and not event[1].finished)
                if response is None and ended:
                    return self._refusal(event)
                if response is None:
                    response = web.StreamResponse(
                        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
                    )
                    await response.prepare(request)
                if event[0] == "tokens":
                    for text in self._text(event):
                        await response.write(_sse(chunks.tokens(event[2], text)))
                    continue
                if ended:  # after tokens went out: an error event, as vLLM sends
                    why = event[1] if event[0] == "failed" else event[1].rejected_reason
                    await response.write(_sse(error_body(f"the request ended: {why}")))
                    break
                outcome = event[1]
                for index in range(ask.n):
                    await response.write(_sse(chunks.finish(index)))
                if ask.include_usage:
                    usage = chunks.usage(
                        len(ask.prompt), outcome.output_tokens, outcome.cached_prompt_tokens
                    )
                    await response.write(_sse(usage))
                await response.write(b"data: [DONE]\n\n")
                break
            await response.write_eof()
        except ConnectionResetError:  # the client went away; the request runs on
            pass
        return response

    async def _whole(self, queue: asyncio.Queue, ask, chunks: Chunks):
        from aiohttp import web

        texts = [""] * ask.n
        while True:
            event = await queue.get()
            if event[0] == "tokens":
                texts[event[2]] += "".join(self._text(event))
                continue
            if event[0] == "failed" or not event[1].finished:
                return self._refusal(event)
            outcome = event[1]
            usage = usage_of(len(ask.prompt), outcome.output_tokens, outcome.cached_prompt_tokens)
            return web.json_response(chunks.whole(texts, usage))


class _ProtocolErrorsInOneLine(logging.Filter):
    """aiohttp answers a request it cannot parse (a TLS hello, HTTP/9.9, a lying
    Content-Length) with a 400 itself and logs the parser's traceback; a server facing
    the internet sees these all day, so each becomes one line without the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError

        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError):
            record.msg, record.args = "pagesim serve: bad request: %s", (str(error)[:200],)
            record.exc_info = record.exc_text = None
        return True


def _one_line_for_bad_requests() -> None:
    logger = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, _ProtocolErrorsInOneLine) for f in logger.filters):
        logger.addFilter(_ProtocolErrorsInOneLine())


async def serve(server: Server, host: str, port: int, on_ready) -> None:
    """Serve until ``server.stopped`` is set (a signal, or the engine failing);
    ``on_ready(host, port)`` is called once the socket listens (port 0: the one picked)."""
    from aiohttp import web

    _one_line_for_bad_requests()
    # in-flight streams get 2 s to end when the server stops
    runner = web.AppRunner(
        server.app(), handle_signals=False, access_log=None, shutdown_timeout=2.0
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0]
        on_ready(bound[0], bound[1])
        await server.stopped.wait()
    finally:
        await runner.cleanup()
