"""What a vLLM engine's own log says of a run: ``pagesim import-run ... --engine-log FILE``.

vLLM V1 logs a stats line every few seconds (``vllm/v1/metrics/loggers.py``,
``LoggingStatLogger.log``)::

    Engine 000: Avg prompt throughput: 4915.5 tokens/s, Avg generation throughput: 96.2
    tokens/s, Running: 12 reqs, Waiting: 0 reqs, GPU KV cache usage: 6.8%, Prefix cache
    hit rate: 45.1%

(``Preemptions: N`` and others may sit between the counts and the cache usage). Its
prefix cache hit rate is prefix-cache hits over prompt tokens looked up, over the most
recent :data:`VLLM_HIT_RATE_REQUESTS` requests (``CachingMetrics(max_recent_requests=
1000)`` in ``vllm/v1/metrics/stats.py``): the last line's figure is the run's last 1,000
requests, or the whole run when it had fewer. Lines of another format are skipped; a
file with no stats line is an error (it is not the log asked for).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sim.recorded.files import sha256_of
from sim.recorded.run import RecordError

#: The requests vLLM's logged prefix cache hit rate spans (module doc).
VLLM_HIT_RATE_REQUESTS = 1000

_STATS = re.compile(
    r"Running: (?P<running>\d+) reqs, Waiting: (?P<waiting>\d+) reqs.*?"
    r"KV cache usage: (?P<usage>[\d.]+)%, Prefix cache hit rate: (?P<hit>[\d.]+)%"
)


@dataclass(frozen=True)
class EngineLog:
    """The stats lines of an engine log: how many, and the last prefix cache hit rate (a
    fraction, over vLLM's last :data:`VLLM_HIT_RATE_REQUESTS` requests)."""

    lines: int
    prefix_hit_rate: float


def read_engine_log(path: Path, files: dict[str, str]) -> EngineLog:
    """The stats lines of vLLM's log ``path`` (module doc); records its sha256 in
    ``files``. RecordError (one line) for a file that cannot be read or holds none."""
    from sim.config.textfile import read_text

    files[str(path)] = sha256_of(path)
    matches = list(_STATS.finditer(read_text(path, RecordError)))
    if not matches:
        raise RecordError(
            f"{path}: no vLLM stats line ('Running: N reqs, Waiting: N reqs, ... Prefix cache "
            "hit rate: X%'); give the engine's log with its periodic stats"
        )
    hit = float(matches[-1]["hit"])
    if hit > 100:
        raise RecordError(f"{path}: Prefix cache hit rate: {hit}% is more than 100%")
    return EngineLog(len(matches), hit / 100)
