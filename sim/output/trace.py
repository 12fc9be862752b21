"""A run as a Chrome / Perfetto trace: the trace-event JSON format, opened by
ui.perfetto.dev or chrome://tracing. Timestamps are simulated time in microseconds.

Each replica is a process (``pid`` = replica + 1, named "replica N") with:

- thread "steps": one complete slice (``X``) per engine step, named by what it computed
  (``prefill``, ``decode``, ``prefill+decode``, ``swap out``), its step-log row in args;
- thread "requests": one nestable async slice (``b``/``e``, category ``request``, ``id``
  the request's id) per request it served, from arrival to finish, holding the phases
  ``queued`` (to first scheduled), ``prefill`` (to first token) and ``decode`` (to finish);
  a ``preempted`` nestable instant (``n``) at each preemption; a rejected request is one
  ``rejected`` instant at its arrival with the reason; for one the run did not finish,
  the phase it was in (and the request) end at the run's last step end, with a note;
- counters (``C``), one sample per step: ``KV used`` (fraction of the pool, after the
  step), ``KV cached`` (blocks holding reusable prefix KV, after the step) and
  ``requests`` (``running``: the step's sequences, ``waiting``: the queue, during the
  step), which drops to zero where the replica goes idle.

Times are rounded to whole nanoseconds (three decimals of a microsecond), and a step
never starts before the previous one on its replica ends, so slices nest exactly in
viewers that work in integer nanoseconds. Events are written one per line as they are
made (memory stays flat on long runs), in canonical form (sorted keys, no spaces), so
the same run gives the same bytes; the gzip form has no name or time in its header.
"""

from __future__ import annotations

import bisect
import gzip
import io
import itertools
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from sim.engine.records import LIMIT_NAMES, UNFINISHED_REASON, RequestOutcome
from sim.output.steplog import StepLog

__all__ = [
    "GZIP_THRESHOLD_EVENTS",
    "TRACE_FORMATS",
    "trace_event_count",
    "trace_lines",
    "write_trace",
]

#: ``auto`` writes trace.json.gz above this many events (about 30 MB of JSON), else
#: trace.json; ``json`` and ``gzip`` force one.
GZIP_THRESHOLD_EVENTS = 200_000
TRACE_FORMATS = ("auto", "json", "gzip")

#: Names of a replica's two threads, by their offset in its tid (see :func:`_tids`).
_THREADS = ("steps", "requests")
_PHASES = ("queued", "prefill", "decode")
#: The step-log columns a step's events show.
_STEP_ARGS = (
    "replica",
    "batch_size",
    "num_prefill_tokens",
    "num_decode_tokens",
    "cached_blocks",
    "swapped_blocks",
    "queue_len",
    "num_preempted",
    "limit",
)
_STEP_COLUMNS = (*_STEP_ARGS, "used_blocks")
_CHUNK_LINES = 20_000  # lines joined per write
_CHUNK_STEPS = 50_000  # step rows formatted at a time


def _pid(replica: int) -> int:
    return replica + 1  # pid 0 is the idle process to some viewers


def _tids(replica: int) -> tuple[int, int]:
    """(steps, requests) thread ids: unique over the whole trace, as viewers that
    follow Linux (Perfetto) take a tid seen under two pids for one reused thread."""
    return 10 * _pid(replica) + 1, 10 * _pid(replica) + 2


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def write_trace(
    out_dir: str | Path,
    outcomes: Sequence[RequestOutcome],
    steps: StepLog,
    pool_blocks: int,
    *,
    fmt: str = "auto",
    title: str = "pagesim run",
    hand_offs: Mapping[str, np.ndarray] | None = None,
) -> Path:
    """Write ``out_dir``/trace.json or trace.json.gz (``fmt``: one of TRACE_FORMATS;
    ``auto`` picks gzip above GZIP_THRESHOLD_EVENTS events) and return its path.
    ``pool_blocks`` is one replica's KV pool in the step log's units (blocks, or slots
    for contiguous baselines). ``hand_offs`` (hand_offs.csv's columns, sim.run.pools):
    the peer link's reads, on a track of their own. Reads its inputs only."""
    if fmt not in TRACE_FORMATS:
        raise ValueError(f"trace format must be one of {TRACE_FORMATS}, got {fmt!r}")
    layout = _layout(outcomes, steps)  # once: the count and the lines both need it
    reads = _reads(hand_offs)
    count = _event_count(outcomes, layout) + (3 + len(reads) if hand_offs is not None else 0)
    compress = fmt == "gzip" or (fmt == "auto" and count > GZIP_THRESHOLD_EVENTS)
    path = Path(out_dir) / ("trace.json.gz" if compress else "trace.json")
    with open(path, "wb") as raw:
        # No file name and mtime 0 in a gzip header: the same run gives the same bytes.
        binary = (
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6)
            if compress
            else raw
        )
        with io.TextIOWrapper(binary, encoding="ascii", newline="\n") as text:
            lines = _lines(outcomes, layout, pool_blocks)
            if hand_offs is not None:
                lines = itertools.chain(lines, _link_lines(reads, max(layout[1], default=0) + 1))
            _write_document(text, lines, pool_blocks, title, count)
    return path


def _reads(hand_offs: Mapping[str, np.ndarray] | None) -> list[tuple]:
    """(request, source, target, start s, end s, bytes) of each read that ended."""
    if hand_offs is None:
        return []
    names = ("req_id", "prefill_instance", "decode_instance", "transfer_start_s")
    rows = zip(*(hand_offs[n].tolist() for n in (*names, "transfer_end_s", "bytes")))
    return [row for row in rows if math.isfinite(row[4])]


def _link_lines(reads: list[tuple], link: int) -> Iterator[str]:
    """The peer link as a process after the replicas': one slice per read, from its
    start to its end (concurrent reads overlap: they share the link)."""
    pid, tid = _pid(link), _tids(link)[0]
    yield _canonical(_meta("process_name", pid, tid, name="peer link"))
    yield _canonical(_meta("process_sort_index", pid, tid, sort_index=link))
    yield _canonical(_meta("thread_name", pid, tid, name="KV reads"))
    for req_id, source, target, start, end, nbytes in reads:
        ts, dur = _ns(start), _ns(end) - _ns(start)
        args = {"request": req_id, "from": source, "to": target, "bytes": nbytes}
        event = {"name": f"read {req_id}", "ph": "X", "pid": pid, "tid": tid, "args": args}
        yield _canonical(event | {"ts": ts / 1000, "dur": dur / 1000})


def _write_document(text, lines, pool_blocks, title, count) -> None:
    """``{"traceEvents":[ one event a line ], "otherData":{...}}``. No displayTimeUnit:
    older Perfetto took "ms" there for the unit of ts (it is microseconds by the format);
    the events come first, as Chrome writes them, for parsers that stream."""
    other = {
        "generator": "pagesim",
        "title": title,
        "time": "simulated; 1 us of trace time is 1 us of simulated time",
        "pool_blocks": int(pool_blocks),
        "events": count,
    }
    text.write('{"traceEvents":[\n')
    chunk: list[str] = []
    first = True
    for line in lines:
        chunk.append(line)
        if len(chunk) == _CHUNK_LINES:
            text.write(("" if first else ",\n") + ",\n".join(chunk))
            first, chunk = False, []
    if chunk:
        text.write(("" if first else ",\n") + ",\n".join(chunk))
    text.write(f'\n],\n"otherData":{_canonical(other)}}}\n')


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def trace_lines(
    outcomes: Sequence[RequestOutcome], steps: StepLog, pool_blocks: int
) -> Iterator[str]:
    """The trace's events, one canonical JSON object text each, in file order: names,
    then each replica's steps and counters, then the requests in ``outcomes`` order."""
    yield from _lines(outcomes, _layout(outcomes, steps), pool_blocks)


def _lines(outcomes: Sequence[RequestOutcome], layout, pool_blocks: int) -> Iterator[str]:
    steps, replicas, bounds, run_end, idle = layout
    for r in replicas:
        yield from _metadata(r)
    for start in range(0, len(steps), _CHUNK_STEPS):
        part = slice(start, start + _CHUNK_STEPS)
        columns = {name: steps.column(name, part.start, part.stop) for name in _STEP_COLUMNS}
        yield from _step_lines(columns, bounds[0][part], bounds[1][part], idle[part], pool_blocks)
    for outcome in outcomes:
        yield from _request_lines(outcome, run_end)


def trace_event_count(outcomes: Iterable[RequestOutcome], steps: StepLog) -> int:
    """How many events :func:`trace_lines` yields (decided before writing: the format)."""
    outcomes = list(outcomes)
    return _event_count(outcomes, _layout(outcomes, steps))


def _event_count(outcomes: Sequence[RequestOutcome], layout) -> int:
    steps, replicas, _, _, idle = layout
    count = 6 * len(replicas) + 4 * len(steps) + int(idle.sum())
    for o in outcomes:
        if o.rejected_reason and o.rejected_reason != UNFINISHED_REASON:
            count += 1
            continue
        if o.finished:
            phases = 3
        else:
            phases = 1 + (not math.isnan(o.first_scheduled_s)) + (not math.isnan(o.first_token_s))
        count += 2 + 2 * phases + len(o.preemption_times)
    return count


def _layout(outcomes: Sequence[RequestOutcome], steps: StepLog):
    """(steps, replicas, (step start, end) in ns, run end in ns, idle after each step)."""
    replica_col = steps.column("replica").astype(np.int64)
    replicas = sorted(set(replica_col.tolist()) | {o.replica for o in outcomes})
    bounds = _step_bounds(steps.column("time_s"), steps.column("duration_s"), replica_col)
    if len(steps):
        run_end = int(bounds[1].max())
    else:
        run_end = max((_ns(o.arrival_s) for o in outcomes), default=0)
    busy_at_end = {o.replica for o in outcomes if o.rejected_reason == UNFINISHED_REASON}
    return steps, replicas, bounds, run_end, _idle_after(bounds, replica_col, run_end, busy_at_end)


def _metadata(replica: int) -> Iterator[str]:
    pid = _pid(replica)
    steps_tid = _tids(replica)[0]
    yield _canonical(_meta("process_name", pid, steps_tid, name=f"replica {replica}"))
    yield _canonical(_meta("process_sort_index", pid, steps_tid, sort_index=replica))
    for offset, (tid, name) in enumerate(zip(_tids(replica), _THREADS)):
        yield _canonical(_meta("thread_name", pid, tid, name=name))
        yield _canonical(_meta("thread_sort_index", pid, tid, sort_index=offset))


def _meta(kind: str, pid: int, tid: int, **args) -> dict:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "ts": 0, "args": args}


def _step_bounds(
    time_s: np.ndarray, duration_s: np.ndarray, replica_col: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of each step in whole ns; on each replica a step starts no earlier
    than the previous one ends (the engine's start = end - duration can fall an ulp
    before the previous end)."""
    start = np.rint(time_s * 1e9).astype(np.int64)
    end = np.rint((time_s + duration_s) * 1e9).astype(np.int64)
    for r in np.unique(replica_col):
        mine = np.flatnonzero(replica_col == r)
        s, e = start[mine], end[mine]
        s[1:] = np.maximum(s[1:], e[:-1])
        start[mine], end[mine] = s, np.maximum(e, s)
    return start, end


def _idle_after(bounds, replica_col, run_end: int, busy_at_end: set[int]) -> np.ndarray:
    """Whether each step's replica sat idle after it: its next step starts later, or it
    was its last and the replica held no unfinished request when the run stopped."""
    start, end = bounds
    idle = np.zeros(len(start), dtype=bool)
    for r in np.unique(replica_col):
        mine = np.flatnonzero(replica_col == r)
        idle[mine[:-1]] = start[mine[1:]] > end[mine[:-1]]
        idle[mine[-1]] = int(r) not in busy_at_end and end[mine[-1]] < run_end
    return idle


def _step_lines(columns, start, end, idle, pool_blocks: int) -> Iterator[str]:
    """The events of a run of steps (``columns``: theirs, by name)."""
    col = {name: columns[name].tolist() for name in _STEP_ARGS}  # Python ints
    used = columns["used_blocks"].astype(np.float64)
    used_fraction = (used / max(int(pool_blocks), 1)).tolist()
    start_us, end_us = (start / 1000).tolist(), (end / 1000).tolist()
    dur_us = ((end - start) / 1000).tolist()
    for i, ts in enumerate(start_us):
        r = col["replica"][i]
        pid, tid = _pid(r), _tids(r)[0]
        where = f'"pid":{pid},"tid":{tid},"ts":'
        prefill, decode = col["num_prefill_tokens"][i], col["num_decode_tokens"][i]
        name = _step_name(prefill, decode)
        yield (
            f'{{"args":{{"batch_size":{col["batch_size"][i]},"decode_tokens":{decode},'
            f'"limit":"{LIMIT_NAMES[col["limit"][i]]}","preempted":{col["num_preempted"][i]},'
            f'"prefill_tokens":{prefill},"swapped_blocks":{col["swapped_blocks"][i]},'
            f'"waiting":{col["queue_len"][i]}}},"cat":"step","dur":{dur_us[i]},'
            f'"name":"{name}","ph":"X",{where}{ts}}}'
        )
        yield (
            f'{{"args":{{"running":{col["batch_size"][i]},"waiting":{col["queue_len"][i]}}},'
            f'"name":"requests","ph":"C",{where}{ts}}}'
        )
        after = f"{where}{end_us[i]}}}"
        yield f'{{"args":{{"fraction":{used_fraction[i]}}},"name":"KV used","ph":"C",{after}'
        yield f'{{"args":{{"blocks":{col["cached_blocks"][i]}}},"name":"KV cached","ph":"C",{after}'
        if idle[i]:
            yield f'{{"args":{{"running":0,"waiting":0}},"name":"requests","ph":"C",{after}'


def _step_name(prefill: int, decode: int) -> str:
    if prefill and decode:
        return "prefill+decode"
    if prefill:
        return "prefill"
    return "decode" if decode else "swap out"


def _request_lines(outcome: RequestOutcome, run_end: int) -> list[str]:
    """One request's events, nested in file order: the request's ``b``, each phase's
    ``b``, the preemptions in it, its ``e``, ..., the request's ``e``."""
    pid, tid = _pid(outcome.replica), _tids(outcome.replica)[1]
    where = f'"pid":{pid},"tid":{tid},"ts":'
    ident = f'"cat":"request","id":{outcome.req_id},'
    arrival = _ns(outcome.arrival_s)
    reason = outcome.rejected_reason
    if reason and reason != UNFINISHED_REASON:
        args = _canonical({"reason": reason, "req_id": outcome.req_id})
        return [f'{{"args":{args},{ident}"name":"rejected","ph":"n",{where}{arrival / 1000}}}']
    points = [arrival]
    for seconds in (outcome.first_scheduled_s, outcome.first_token_s, outcome.finish_s):
        if math.isnan(seconds):
            break
        points.append(max(_ns(seconds), points[-1]))
    if not outcome.finished:  # its last phase is still open at the run's end
        points.append(max(run_end, points[-1]))
    args = {
        "req_id": outcome.req_id,
        "prompt_tokens": outcome.prompt_len,
        "output_tokens": outcome.output_tokens,
        "cached_prompt_tokens": outcome.cached_prompt_tokens,
        "preemptions": outcome.num_preemptions,
        "n": outcome.n,
        "tenant": outcome.tenant,
        "priority": outcome.priority,
    }
    if not outcome.finished:
        args["note"] = f"{reason}: ends at the run's last step"
    phases = len(points) - 1
    preempted: list[list[int]] = [[] for _ in range(phases)]
    for seconds in outcome.preemption_times:
        at = min(max(_ns(seconds), points[0]), points[-1])
        preempted[min(max(bisect.bisect_right(points, at) - 1, 0), phases - 1)].append(at)
    end = f'{ident}"name":"request","ph":"e",{where}{points[-1] / 1000}}}'
    lines = [
        f'{{"args":{_canonical(args)},{ident}"name":"request","ph":"b",{where}{arrival / 1000}}}'
    ]
    for k in range(phases):
        name = _PHASES[k]
        lines.append(f'{{{ident}"name":"{name}","ph":"b",{where}{points[k] / 1000}}}')
        for at in sorted(preempted[k]):
            lines.append(f'{{{ident}"name":"preempted","ph":"n",{where}{at / 1000}}}')
        lines.append(f'{{{ident}"name":"{name}","ph":"e",{where}{points[k + 1] / 1000}}}')
    lines.append("{" + end)
    return lines
