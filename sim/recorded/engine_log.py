"""What a vLLM engine's own log says of a run: ``pagesim import-run ... --engine-log FILE``.

vLLM V1 logs a stats line every few seconds (``vllm/v1/metrics/loggers.py``,
``LoggingStatLogger.log``)::

    Engine 000: Avg prompt throughput: 4915.5 tokens/s, Avg generation throughput: 96.2
    tokens/s, Running: 12 reqs, Waiting: 0 reqs, GPU KV cache usage: 6.8%, Prefix cache
    hit rate: 45.1%

(``Preemptions: N`` and others may sit between the counts and the cache usage), and at
start-up its version (``vLLM server version X, serving model M``, or the logo's) and
the engine arguments that differ from the defaults (``vllm/entrypoints/common/
startup.py``: ``non-default args: {'max_num_seqs': 64, ...}``, a Python dict's repr). Its
prefix cache hit rate is prefix-cache hits over prompt tokens looked up, over the most
recent :data:`VLLM_HIT_RATE_REQUESTS` requests (``CachingMetrics(max_recent_requests=
1000)`` in ``vllm/v1/metrics/stats.py``): the last line's figure is the run's last 1,000
requests, or the whole run when it had fewer. Of the arguments, those pagesim maps
(sim.recorded.engine_args) are read; a value that is not a plain literal is skipped.
Lines of another format are skipped; a file with neither a stats line nor the
arguments is an error (it is not the log asked for).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from sim.recorded.files import sha256_of
from sim.recorded.run import RecordError

#: The requests vLLM's logged prefix cache hit rate spans (module doc).
VLLM_HIT_RATE_REQUESTS = 1000

#: The version line: plain, or in the start-up logo (ANSI colours between the words).
_VERSION = re.compile(
    r"vLLM (?:API )?server version ([0-9][\w.+-]*)|"
    r"version\s+(?:\x1b\[[0-9;]*m)?([0-9]+\.[0-9]+\.[0-9][\w.+-]*)"
)
_ARGUMENTS = re.compile(r"non-default args: (\{.*\})\s*$", re.MULTILINE)
_STATS = re.compile(
    r"Running: (?P<running>\d+) reqs, Waiting: (?P<waiting>\d+) reqs.*?"
    r"KV cache usage: (?P<usage>[\d.]+)%, Prefix cache hit rate: (?P<hit>[\d.]+)%"
)


@dataclass(frozen=True)
class EngineLog:
    """What an engine log says: how many stats lines, the last prefix cache hit rate (a
    fraction, over vLLM's last :data:`VLLM_HIT_RATE_REQUESTS` requests; None without a
    stats line), and the engine arguments it logged (vLLM's names)."""

    lines: int
    prefix_hit_rate: float | None
    arguments: dict = field(default_factory=dict)


def read_engine_log(path: Path, files: dict[str, str]) -> EngineLog:
    """The stats lines of vLLM's log ``path`` (module doc); records its sha256 in
    ``files``. RecordError (one line) for a file that cannot be read or holds none."""
    from sim.inputs.textfile import read_text

    files[str(path)] = sha256_of(path)
    text = read_text(path, RecordError)
    matches = list(_STATS.finditer(text))
    arguments = _arguments(text)
    version = _VERSION.search(text)
    if version:
        arguments["version"] = (version[1] or version[2]).rstrip(",")
    if not matches and not arguments:
        raise RecordError(
            f"{path}: no vLLM stats line ('Running: N reqs, Waiting: N reqs, ... Prefix cache "
            "hit rate: X%') nor its 'non-default args' line; give the engine's log"
        )
    hit = float(matches[-1]["hit"]) if matches else None
    if hit is not None and hit > 100:
        raise RecordError(f"{path}: Prefix cache hit rate: {hit}% is more than 100%")
    return EngineLog(len(matches), None if hit is None else hit / 100, arguments)


def _arguments(text: str) -> dict:
    """The last ``non-default args`` line's arguments that pagesim maps, each a plain
    literal (the others are left out)."""
    from sim.recorded.engine_args import is_engine_argument

    found = _ARGUMENTS.findall(text)
    if not found:
        return {}
    try:
        values = ast.literal_eval(found[-1])
    except (ValueError, SyntaxError, RecursionError, MemoryError):
        # a value that is not a literal (an enum's repr): read the literal pairs alone
        values = dict(re.findall(r"'(\w+)': ('[^']*'|-?[\d.]+|True|False|None)", found[-1]))
        values = {k: ast.literal_eval(v) for k, v in values.items()}
    if not isinstance(values, dict):
        return {}
    return {k: v for k, v in values.items() if isinstance(k, str) and is_engine_argument(k)}
