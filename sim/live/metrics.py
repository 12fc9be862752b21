"""``/metrics`` of ``pagesim serve``: the Prometheus text format, in vLLM's names.

The names are those of vLLM's v1 engine (its ``vllm/v1/metrics/loggers.py``), with its
labels ``model_name`` and ``engine`` (here: the replica), so a dashboard or a scraper
made for vLLM reads a pagesim server unchanged:

=======================================  ==========  =====================================
name (as exposed)                        type        here
=======================================  ==========  =====================================
``vllm:num_requests_running``            gauge       requests with a sequence on the device
``vllm:num_requests_waiting``            gauge       requests in the waiting queue
``vllm:kv_cache_usage_perc``             gauge       used KV blocks / pool (0..1)
``vllm:gpu_cache_usage_perc``            gauge       the same (vLLM's older name)
``vllm:prefix_cache_queries_total``      counter     prompt tokens of finished requests
``vllm:prefix_cache_hits_total``         counter     ... of them served from the prefix cache
``vllm:num_preemptions_total``           counter     preemptions
``vllm:prompt_tokens_total``             counter     prefill tokens computed
``vllm:generation_tokens_total``         counter     output tokens streamed
``vllm:request_success_total``           counter     finished requests (``finished_reason``)
``vllm:time_to_first_token_seconds``     histogram   TTFT, at each request's first token
``vllm:inter_token_latency_seconds``     histogram   each later token's gap
``vllm:time_per_output_token_seconds``   histogram   TPOT of each finished request
``vllm:e2e_request_latency_seconds``     histogram   arrival to last token
``vllm:iteration_tokens_total``          histogram   tokens computed per step
=======================================  ==========  =====================================

Differences from vLLM: the prefix-cache counters are added when a request finishes
(vLLM adds them at scheduling), so they lag by one request's life; the gauges are read
after each step. Buckets are a 1-2.5-5 series (pagesim's own choice).

prometheus-client (the ``serve`` extra) keeps the values; every server has its own
registry, so two servers in one process (tests) never share a counter. Its methods are
thread-safe: the engine thread updates, the HTTP thread renders.
"""

from __future__ import annotations

import math
import threading

from sim.engine.records import RequestOutcome, StepRecord


def series(low: float, high: float) -> list[float]:
    """1, 2.5, 5 times powers of ten from ``low`` up to the first value >= ``high``."""
    values, decade = [], 10 ** math.floor(math.log10(low))
    while not values or values[-1] < high:
        for value in (decade, 2.5 * decade, 5 * decade):
            if value >= low and (not values or values[-1] < high):
                values.append(value)
        decade *= 10
    return values


#: attribute -> (prometheus_client kind, exposed name, help, extra: more labels, buckets)
METRICS = {
    "running": (
        "Gauge",
        "vllm:num_requests_running",
        "Requests with a sequence on the device.",
        {},
    ),
    "waiting": ("Gauge", "vllm:num_requests_waiting", "Requests waiting.", {}),
    "kv_usage": (
        "Gauge",
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        {},
    ),
    "gpu_usage": ("Gauge", "vllm:gpu_cache_usage_perc", "KV-cache usage (vLLM's older name).", {}),
    "queries": (
        "Counter",
        "vllm:prefix_cache_queries",
        "Prompt tokens looked up in the prefix cache.",
        {},
    ),
    "hits": (
        "Counter",
        "vllm:prefix_cache_hits",
        "Prompt tokens served from the prefix cache.",
        {},
    ),
    "preemptions": ("Counter", "vllm:num_preemptions", "Preemptions.", {}),
    "prompt_tokens": ("Counter", "vllm:prompt_tokens", "Prefill tokens.", {}),
    "generation_tokens": ("Counter", "vllm:generation_tokens", "Output tokens streamed.", {}),
    # Taken by the engine (routed to a replica): at every scrape received = success +
    # rejected + running + waiting, since all of them change under the engine's lock.
    "received": ("Counter", "pagesim:requests_received", "Requests the engine took.", {}),
    "rejected": (
        "Counter",
        "pagesim:requests_rejected",
        "Requests the engine refused or could not finish.",
        {},
    ),
    "success": (
        "Counter",
        "vllm:request_success",
        "Finished requests.",
        {"labels": ["finished_reason"]},
    ),
    "ttft": (
        "Histogram",
        "vllm:time_to_first_token_seconds",
        "Time to first token.",
        {"buckets": "seconds"},
    ),
    "itl": (
        "Histogram",
        "vllm:inter_token_latency_seconds",
        "Inter-token latency.",
        {"buckets": "seconds"},
    ),
    "tpot": (
        "Histogram",
        "vllm:time_per_output_token_seconds",
        "Time per output token of each request.",
        {"buckets": "seconds"},
    ),
    "e2e": (
        "Histogram",
        "vllm:e2e_request_latency_seconds",
        "End-to-end request latency.",
        {"buckets": "seconds"},
    ),
    "iteration": (
        "Histogram",
        "vllm:iteration_tokens_total",
        "Tokens per engine step.",
        {"buckets": "tokens"},
    ),
}


class ServingMetrics:
    """The Prometheus metrics of one server (module docstring)."""

    def __init__(self, model_name: str, num_replicas: int = 1):
        import prometheus_client as prom

        self.registry = prom.CollectorRegistry()
        self.lock = threading.Lock()  # the engine driver holds it while it steps
        self._model = model_name
        buckets = {"seconds": series(1e-3, 600.0), "tokens": series(1, 16384)}
        for attr, (kind, name, doc, extra) in METRICS.items():
            labels = ["model_name", "engine", *extra.get("labels", ())]
            more = {"buckets": buckets[extra["buckets"]]} if "buckets" in extra else {}
            metric = getattr(prom, kind)(
                name, doc, labelnames=labels, registry=self.registry, **more
            )
            setattr(self, attr, metric)
        for replica in range(num_replicas):  # every series shows from the start, at 0
            for attr, (kind, _, _, extra) in METRICS.items():
                if kind != "Histogram" and not extra.get("labels"):
                    getattr(self, attr).labels(model_name, str(replica))

    def _at(self, metric, replica: int = 0, *more: str):
        return metric.labels(self._model, str(replica), *more)

    def arrived(self, replica: int, view) -> None:
        """A request was routed to ``replica`` (its EngineView ``view``)."""
        self._at(self.received, replica).inc()
        self.load(replica, view)

    def load(self, replica: int, view) -> None:
        """The running and waiting gauges of ``replica`` as they stand."""
        self._at(self.running, replica).set(len(view.running()))
        self._at(self.waiting, replica).set(view.num_waiting)

    def step(self, record: StepRecord, view) -> None:
        """After a step of replica ``record.replica``; ``view`` is its EngineView."""
        replica = record.replica
        self.load(replica, view)
        self._at(self.kv_usage, replica).set(view.kv_usage)
        self._at(self.gpu_usage, replica).set(view.kv_usage)
        if record.num_preempted:
            self._at(self.preemptions, replica).inc(record.num_preempted)
        self._at(self.prompt_tokens, replica).inc(record.num_prefill_tokens)
        tokens = record.num_prefill_tokens + record.num_decode_tokens
        self._at(self.iteration, replica).observe(tokens)

    def generated(self, count: int, replica: int = 0) -> None:
        self._at(self.generation_tokens, replica).inc(count)

    def first_token(self, seconds: float, replica: int = 0) -> None:
        self._at(self.ttft, replica).observe(seconds)

    def token_gap(self, seconds: float, count: int = 1, replica: int = 0) -> None:
        """``count`` tokens came at once, ``seconds`` after the previous one: one gap of
        that length, and ``count - 1`` of none."""
        histogram = self._at(self.itl, replica)
        histogram.observe(seconds)
        for _ in range(count - 1):
            histogram.observe(0.0)

    def finished(self, outcome: RequestOutcome, view) -> None:
        """A request left the engine (finished, refused or aborted); ``view`` is its
        replica's EngineView, whose counts it has left."""
        replica = outcome.replica
        self.load(replica, view)
        if not outcome.finished:
            self._at(self.rejected, replica).inc()
            return
        self._at(self.success, replica, "length").inc()
        self._at(self.queries, replica).inc(outcome.prompt_len)
        self._at(self.hits, replica).inc(outcome.cached_prompt_tokens)
        self._at(self.e2e, replica).observe(outcome.finish_s - outcome.arrival_s)
        if outcome.output_len >= 2:
            tpot = (outcome.finish_s - outcome.first_token_s) / (outcome.output_len - 1)
            self._at(self.tpot, replica).observe(tpot)

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type, read under :attr:`lock` (the
        engine's, while it changes the counts) so the counts agree with each other."""
        import prometheus_client as prom

        with self.lock:
            return prom.generate_latest(self.registry), prom.CONTENT_TYPE_LATEST
