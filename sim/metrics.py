"""Run metrics: the per-step log, the per-request table, summary.json and the text tables.

Data in: one `StepLog.record(...)` per simulator step, and at the end the list of
`sim.types.Request` objects. Data out: requests.csv, steps.csv and summary.json (all
byte-identical for identical inputs) plus the human tables printed by the CLI.

Conventions (so the numbers mean one thing everywhere):

* A request is *finished* when it has a finish time and no rejection reason; it is
  *rejected* when `rejected_reason` is non-empty.
* Warm-up: requests are ordered by (arrival, req_id); the first `warmup_requests` are
  excluded from every latency, goodput and throughput figure. Counts (requests, finished,
  rejected, preemptions) and the prefix hit rate cover the whole run.
* Output tokens of a finished request are ``output_len * n``; of an unfinished one, what it
  had generated. TPOT is per sample stream, ``(finish - first_token) / (output_len - 1)``
  for ``output_len >= 2``: the n samples of a request decode side by side, so dividing by
  ``output_len * n - 1`` would report a per-token latency n times better than any user sees.
* Duration is the span from the first measured arrival to the last measured finish.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sim import steady
from sim.sequences import LIMIT_NAMES
from sim.types import Request

__all__ = [
    "KV_SPLIT_COLUMNS",
    "KV_SPLIT_KEYS",
    "REQUEST_COLUMNS",
    "STEP_COLUMNS",
    "StepLog",
    "compare_table",
    "format_summary_table",
    "request_table",
    "summarize",
    "summary_json",
    "summary_rows",
    "write_outputs",
]

#: Columns of steps.csv, in file order (time first, then `StepLog.record`'s arguments).
STEP_COLUMNS = (
    "time_s",
    "replica",
    "duration_s",
    "batch_size",
    "num_prefill_tokens",
    "num_decode_tokens",
    "used_blocks",
    "cached_blocks",
    "free_blocks",
    "token_slots",
    "reserved_slots",
    "internal_frag_slots",
    "external_frag_slots",
    "free_slots",
    "swapped_blocks",
    "queue_len",
    "num_preempted",
    "limit",
)
_STEP_FLOAT_COLUMNS = frozenset({"time_s", "duration_s"})
#: Columns stored as codes and written by name: steps.csv's ``limit`` (sim.sequences.Limit).
_STEP_NAMED_COLUMNS = {"limit": LIMIT_NAMES}
_STEP_INDEX = {name: i for i, name in enumerate(STEP_COLUMNS)}

#: The per-step split of one replica's token slots, and its names in summary["kv"].
KV_SPLIT_COLUMNS = (
    "token_slots",
    "reserved_slots",
    "internal_frag_slots",
    "external_frag_slots",
    "free_slots",
)
KV_SPLIT_KEYS = ("token_states", "reserved", "internal_frag", "external_frag", "free")

#: Columns of requests.csv, in file order.
REQUEST_COLUMNS = (
    "req_id",
    "arrival_s",
    "first_scheduled_s",
    "first_token_s",
    "finish_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "prompt_tokens",
    "output_tokens",
    "cached_prompt_tokens",
    "preemptions",
    "replica",
    "tenant",
    "priority",
    "n",
    "rejected_reason",
)
_REQUEST_FLOAT_COLUMNS = frozenset(
    {"arrival_s", "first_scheduled_s", "first_token_s", "finish_s", "ttft_s", "tpot_s", "e2e_s"}
)

# Rows per chunk when writing CSVs: bounds the memory of the string lists.
_CSV_CHUNK_ROWS = 100_000


# --------------------------------------------------------------------------- step log


class StepLog:
    """Append-only log of simulator steps, one row per `record` call.

    Rows live in one preallocated float64 matrix that doubles when full, so a record is
    one row assignment (well under a microsecond) and no Python object per step is kept.
    Integer-valued columns are exact in float64 up to 2**53."""

    def __init__(self, initial_capacity: int = 4096) -> None:
        self._data = np.zeros((max(1, int(initial_capacity)), len(STEP_COLUMNS)))
        self._size = 0

    def record(self, *row: float) -> None:
        """Append one step: one number per STEP_COLUMNS entry, in that order (``time_s``,
        the step's start in simulated seconds, first). Mutates the log; grows its storage
        geometrically when full."""
        i = self._size
        if i == self._data.shape[0]:
            self._grow()
        self._data[i] = row  # numpy rejects a row of the wrong length
        self._size = i + 1

    def _grow(self) -> None:
        bigger = np.zeros((2 * self._data.shape[0], self._data.shape[1]))
        bigger[: self._size] = self._data[: self._size]
        self._data = bigger

    def __len__(self) -> int:
        return self._size

    @property
    def capacity(self) -> int:
        """Rows that fit before the next growth."""
        return int(self._data.shape[0])

    def as_array(self) -> np.ndarray:
        """Read-only view of the recorded rows, shape (len, len(STEP_COLUMNS))."""
        view = self._data[: self._size]
        view.flags.writeable = False
        return view

    def column(self, name: str) -> np.ndarray:
        """Read-only view of one column (a name from STEP_COLUMNS; KeyError otherwise)."""
        view = self._data[: self._size, _STEP_INDEX[name]]
        view.flags.writeable = False
        return view


# ----------------------------------------------------------------------- request table


def request_table(requests: Iterable[Request]) -> dict[str, np.ndarray]:
    """Per-request columns (REQUEST_COLUMNS plus boolean `finished` / `rejected`), rows
    ordered by (arrival_s, req_id). Reads the requests; mutates nothing."""
    reqs = list(requests)
    order = np.lexsort((np.array([r.req_id for r in reqs]), np.array([r.arrival_s for r in reqs])))
    reqs = [reqs[int(i)] for i in order]

    def floats(attr: str) -> np.ndarray:
        return np.array([getattr(r, attr) for r in reqs], dtype=np.float64)

    def ints(values: Iterable[int]) -> np.ndarray:
        return np.fromiter(values, dtype=np.int64, count=len(reqs))

    arrival, first_token, finish = floats("arrival_s"), floats("first_token_s"), floats("finish_s")
    reason = np.array([r.rejected_reason for r in reqs], dtype=object)
    output_len, n = ints(r.output_len for r in reqs), ints(r.n for r in reqs)
    rejected = reason != ""
    finished = ~np.isnan(finish) & ~rejected
    generated = ints(r.generated for r in reqs)
    multi_token = finished & (output_len >= 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(multi_token, (finish - first_token) / np.maximum(output_len - 1, 1), np.nan)
    return {
        "req_id": ints(r.req_id for r in reqs),
        "arrival_s": arrival,
        "first_scheduled_s": floats("first_scheduled_s"),
        "first_token_s": first_token,
        "finish_s": finish,
        "ttft_s": first_token - arrival,
        "tpot_s": tpot,
        "e2e_s": np.where(finished, finish - arrival, np.nan),
        "prompt_tokens": ints(r.prompt_len for r in reqs),
        "output_tokens": generated,
        "cached_prompt_tokens": ints(r.cached_prompt_tokens for r in reqs),
        "preemptions": ints(r.num_preemptions for r in reqs),
        "replica": ints(r.replica for r in reqs),
        "tenant": ints(r.tenant for r in reqs),
        "priority": ints(r.priority for r in reqs),
        "n": n,
        "rejected_reason": reason,
        "finished": finished,
        "rejected": rejected,
    }


# --------------------------------------------------------------------------- summary


def summarize(
    requests: Iterable[Request],
    steps: StepLog,
    *,
    total_slots: int,
    slo_ttft_s: float,
    slo_tpot_s: float,
    warmup_requests: int = 0,
    num_replicas: int = 1,
    block_size: int = 1,
    peak_used_blocks: Sequence[int] | None = None,
    cost_model: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The content of summary.json (JSON-ready: Python numbers, None where undefined).

    `total_slots` is the KV pool of ONE replica in token slots (`block_size` per block);
    each step's slot split is divided by it and the result averaged over time, weighting
    steps by their duration. `peak_used_blocks`, one per replica, are the allocators' own
    peaks (they see the pool mid-step, the step log only after each step's finished
    sequences are freed); without them the step log's peak is reported.
    Mutates nothing. Raises ValueError on a negative `warmup_requests` or `num_replicas < 1`.
    """
    if warmup_requests < 0 or num_replicas < 1:
        raise ValueError("warmup_requests must be >= 0 and num_replicas >= 1")
    table = request_table(requests)
    measured = np.arange(table["req_id"].shape[0]) >= warmup_requests
    duration = _duration_s(table, measured)
    done = measured & table["finished"]
    met_slo = _meets_slo(table, slo_ttft_s, slo_tpot_s) & measured
    summary: dict[str, Any] = {
        "num_requests": int(table["req_id"].shape[0]),
        "num_measured": int(measured.sum()),
        "warmup_requests": int(warmup_requests),
        "num_finished": int(table["finished"].sum()),
        "num_rejected": int(table["rejected"].sum()),
        "rejected_reasons": dict(
            sorted(Counter(table["rejected_reason"][table["rejected"]]).items())
        ),
        "duration_s": duration,
        "throughput_rps": _rate(done.sum(), duration),
        "throughput_tok_s": _rate(table["output_tokens"][done].sum(), duration),
        "ttft_s": _distribution(table["ttft_s"][measured]),
        "tpot_s": _distribution(table["tpot_s"][measured]),
        "e2e_s": _distribution(table["e2e_s"][measured]),
        "slo_ttft_s": float(slo_ttft_s),
        "slo_tpot_s": float(slo_tpot_s),
        "goodput": _ratio(met_slo.sum(), measured.sum()),
        "goodput_rps": _rate(met_slo.sum(), duration),
        "mean_batch_size": _mean(steps.column("batch_size")),
        "num_preemptions": int(table["preemptions"].sum()),
        "prefix_hit_rate": _prefix_hit_rate(table, np.ones_like(measured)),
        "num_replicas": int(num_replicas),
        "total_slots": int(total_slots),
        "num_blocks": int(total_slots // block_size),
        "block_size": int(block_size),
        "kv": _kv_split(steps.as_array(), total_slots, block_size, _max(peak_used_blocks)),
    }
    if cost_model is not None:
        summary["cost_model"] = dict(cost_model)
    summary["steady_state"] = steady.steady_state(
        table,
        steps.as_array(),
        _STEP_INDEX,
        warmup_requests=warmup_requests,
        met_slo=_meets_slo(table, slo_ttft_s, slo_tpot_s),
        distribution=_distribution,
    )
    if num_replicas > 1:
        peaks = peak_used_blocks or [None] * num_replicas
        summary["per_replica"] = [
            _replica_summary(table, steps, r, measured, duration, total_slots, block_size, peak)
            for r, peak in zip(range(num_replicas), peaks, strict=True)
        ]
    return summary


def _max(values: Sequence[int] | None) -> int | None:
    return max(values) if values else None


def _duration_s(table: Mapping[str, np.ndarray], measured: np.ndarray) -> float | None:
    finishes = table["finish_s"][measured & table["finished"]]
    if finishes.size == 0:
        return None
    return float(finishes.max() - table["arrival_s"][measured].min())


def _meets_slo(table: Mapping[str, np.ndarray], slo_ttft_s: float, slo_tpot_s: float):
    # A single-token request has no TPOT and so cannot miss the TPOT SLO; NaN TTFT
    # compares False, so an unfinished or rejected request is always a miss.
    tpot_ok = ~(table["tpot_s"] > slo_tpot_s)
    return table["finished"] & (table["ttft_s"] <= slo_ttft_s) & tpot_ok


def _distribution(values: np.ndarray) -> dict[str, float | None]:
    values = values[~np.isnan(values)]
    if values.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"mean": float(values.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def _rate(count, duration_s: float | None) -> float | None:
    if duration_s is None or duration_s <= 0:
        return None
    return float(count) / duration_s


def _ratio(numerator, denominator) -> float | None:
    return float(numerator) / float(denominator) if denominator > 0 else None


def _mean(values: np.ndarray) -> float | None:
    return float(values.mean()) if values.size else None


def _prefix_hit_rate(table: Mapping[str, np.ndarray], subset: np.ndarray) -> float | None:
    # Only requests that were ever scheduled had a chance to hit the prefix cache;
    # counting queued or rejected prompts would dilute the rate with non-attempts.
    tried = subset & ~np.isnan(table["first_scheduled_s"])
    return _ratio(table["cached_prompt_tokens"][tried].sum(), table["prompt_tokens"][tried].sum())


def _kv_split(
    rows: np.ndarray, total_slots: int, block_size: int, peak: int | None
) -> dict[str, Any]:
    """Duration-weighted mean of each step's slot split / total_slots, plus the peak in
    use (``peak`` blocks if given, else the most the step log saw)."""
    used = rows[:, _STEP_INDEX["used_blocks"]]
    if peak is None and used.size:
        peak = int(used.max())
    kv: dict[str, Any] = {
        "peak_used_blocks": peak,
        "peak_used_slots": None if peak is None else peak * block_size,
        "peak_used_fraction": None if peak is None else peak * block_size / total_slots,
    }
    weights = rows[:, _STEP_INDEX["duration_s"]]
    denominator = float(weights.sum()) * total_slots
    for key, column in zip(KV_SPLIT_KEYS, KV_SPLIT_COLUMNS):
        slots = rows[:, _STEP_INDEX[column]]
        kv[key] = float(slots @ weights) / denominator if denominator > 0 else None
    return kv


def _replica_summary(
    table, steps: StepLog, replica, measured, duration, total_slots, block_size, peak
):
    mine = table["replica"] == replica
    done = mine & measured & table["finished"]
    rows = steps.as_array()
    rows = rows[rows[:, _STEP_INDEX["replica"]] == replica]
    return {
        "replica": replica,
        "num_finished": int((mine & table["finished"]).sum()),
        "throughput_rps": _rate(done.sum(), duration),
        "throughput_tok_s": _rate(table["output_tokens"][done].sum(), duration),
        "mean_batch_size": _mean(rows[:, _STEP_INDEX["batch_size"]]),
        "num_preemptions": int(table["preemptions"][mine].sum()),
        "prefix_hit_rate": _prefix_hit_rate(table, mine),
        "kv": _kv_split(rows, total_slots, block_size, peak),
    }


# --------------------------------------------------------------------------- outputs


def write_outputs(
    out_dir: str | Path,
    requests: Iterable[Request],
    steps: StepLog,
    summary: Mapping[str, Any],
) -> dict[str, Path]:
    """Write requests.csv, steps.csv and summary.json into `out_dir` (created if missing,
    files overwritten). Identical inputs give byte-identical files: fixed column order,
    shortest round-trip float text, sorted JSON keys, nothing about the machine or clock.
    Returns the paths by name. Raises ValueError if the summary holds a non-finite float
    that is not None-able (it never does when it comes from `summarize`)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = request_table(requests)
    paths = {name: out / name for name in ("requests.csv", "steps.csv", "summary.json")}
    request_columns = [
        _format_column(table[c], c in _REQUEST_FLOAT_COLUMNS) for c in REQUEST_COLUMNS
    ]
    _write_csv(paths["requests.csv"], REQUEST_COLUMNS, request_columns, len(table["req_id"]))
    rows = steps.as_array()
    step_columns = [
        _named_column(rows[:, j], _STEP_NAMED_COLUMNS[c])
        if c in _STEP_NAMED_COLUMNS
        else _format_column(rows[:, j], c in _STEP_FLOAT_COLUMNS)
        for j, c in enumerate(STEP_COLUMNS)
    ]
    _write_csv(paths["steps.csv"], STEP_COLUMNS, step_columns, rows.shape[0])
    paths["summary.json"].write_text(summary_json(summary), encoding="utf-8")
    return paths


def summary_json(summary: Mapping[str, Any]) -> str:
    """Canonical JSON text of a summary: sorted keys, NaN/inf as null, repr floats."""
    return json.dumps(_json_ready(summary), sort_keys=True, indent=2, allow_nan=False) + "\n"


def _json_ready(value):
    if isinstance(value, Mapping):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def _format_column(values: np.ndarray, is_float: bool):
    """Column as a lazy sequence of strings (sliced per chunk by `_write_csv`)."""
    if values.dtype == object:
        return [_csv_text(str(v)) for v in values]
    if not is_float and np.all(np.floor(values) == values):
        return _Formatted(values.astype(np.int64), int.__repr__)
    # float.__repr__ is the shortest text that reads back to the same double.
    return _Formatted(values.astype(np.float64), float.__repr__)


def _named_column(codes: np.ndarray, names: Sequence[str]):
    """A column of small integer codes written as their names."""
    return _Formatted(codes.astype(np.int64), names.__getitem__)


class _Formatted:
    """Formats a numpy column slice by slice, so a 10**6-row CSV never holds every cell
    as a Python string at once."""

    def __init__(self, values: np.ndarray, to_text) -> None:
        self._values, self._to_text = values, to_text

    def __getitem__(self, chunk: slice) -> list[str]:
        return list(map(self._to_text, self._values[chunk].tolist()))


def _csv_text(text: str) -> str:
    if any(ch in text for ch in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


def _write_csv(path: Path, header: Sequence[str], columns: Sequence, num_rows: int) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as f:
        f.write(",".join(header) + "\n")
        for start in range(0, num_rows, _CSV_CHUNK_ROWS):
            chunk = slice(start, start + _CSV_CHUNK_ROWS)
            f.write("\n".join(map(",".join, zip(*(c[chunk] for c in columns)))) + "\n")


# ---------------------------------------------------------------------- human tables

_LATENCIES = (("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("E2E", "e2e_s"))
_PERCENTILES = ("mean", "p50", "p90", "p99")


def _num(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _ms(value) -> str:
    return "-" if value is None else f"{value * 1000:,.1f}"


def _pct(value) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def summary_rows(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Headline metrics as (label, text) rows, in display order; missing keys show '-'.
    Shared by the CLI tables and the HTML report."""
    s, kv = summary, summary.get("kv") or {}
    window = s.get("steady_state") or {}
    rows = [
        ("verdict", window.get("verdict", "-")),
        ("limited by", _limiter_text(window)),
        ("requests", str(s.get("num_requests", "-"))),
        ("finished", str(s.get("num_finished", "-"))),
        ("rejected", str(s.get("num_rejected", "-"))),
        ("steady throughput req/s", _num(window.get("throughput_rps"))),
        ("steady throughput tok/s", _num(window.get("throughput_tok_s"), 1)),
        ("whole-run throughput req/s", _num(s.get("throughput_rps"))),
        ("whole-run throughput tok/s", _num(s.get("throughput_tok_s"), 1)),
    ]
    for label, key in _LATENCIES:
        dist = _latency(s, key)
        rows += [(f"{label} {p} ms", _ms(dist.get(p))) for p in ("p50", "p90", "p99")]
    rows += [
        ("goodput", _pct(window.get("goodput", s.get("goodput")))),
        ("goodput req/s", _num(window.get("goodput_rps", s.get("goodput_rps")))),
        ("mean batch", _num(s.get("mean_batch_size"), 1)),
        ("preemptions", str(s.get("num_preemptions", "-"))),
        ("prefix hit rate", _pct(s.get("prefix_hit_rate"))),
    ]
    rows += [(f"KV {key.replace('_', ' ')}", _pct(kv.get(key))) for key in KV_SPLIT_KEYS]
    rows.append(("KV peak used", _pct(kv.get("peak_used_fraction"))))
    rows.append(("KV peak blocks", str(kv.get("peak_used_blocks", "-"))))
    return rows


def _latency(summary: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """The headline distribution of ``key``: the steady window's, or (a run with no
    window) the whole run's."""
    window = summary.get("steady_state") or {}
    return window.get(key) or summary.get(key) or {}


def _limiter_text(window: Mapping[str, Any]) -> str:
    """The dominant limiter and its share of the window's steps, e.g. 'max_num_seqs (87%)'."""
    name = window.get("limited_by")
    if name is None:
        return "-"
    return f"{name} ({_pct((window.get('limiters') or {}).get(name))} of steps)"


def _align(rows: Sequence[Sequence[str]]) -> str:
    """Left-align the first column, right-align the others, two spaces between."""
    widths = [max(len(row[j]) for row in rows) for j in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def format_summary_table(summary: Mapping[str, Any]) -> str:
    """The table printed at the end of `pagesim run`: counts and throughput, a latency
    block (mean / p50 / p90 / p99 in ms), then goodput, batching, cache and KV split."""
    rows = dict(summary_rows(summary))
    reasons = summary.get("rejected_reasons") or {}
    rejected = rows["rejected"]
    if reasons:
        rejected += " (" + ", ".join(f"{k}: {v}" for k, v in sorted(reasons.items())) + ")"
    window = summary.get("steady_state") or {}
    top = [
        ["verdict", f"{window.get('verdict', '-')}: {window.get('reason', '')}".rstrip(": ")],
        ["limited by", _limiter_breakdown(window)],
        ["steady window", _window_text(window)],
        ["requests finished / total", f"{rows['finished']} / {rows['requests']}"],
        ["requests rejected", rejected],
        [
            "throughput (steady)",
            f"{rows['steady throughput req/s']} req/s  {rows['steady throughput tok/s']} tok/s",
        ],
        [
            "throughput (whole run)",
            f"{rows['whole-run throughput req/s']} req/s  "
            f"{rows['whole-run throughput tok/s']} tok/s",
        ],
    ]
    latency = [["latency (ms)", *_PERCENTILES]]
    for label, key in _LATENCIES:
        dist = _latency(summary, key)
        latency.append([label, *(_ms(dist.get(p)) for p in _PERCENTILES)])
    kv_split = "  ".join(
        f"{k.replace('_', ' ')} {rows['KV ' + k.replace('_', ' ')]}" for k in KV_SPLIT_KEYS
    )
    bottom = [
        ["goodput", f"{rows['goodput']}  ({rows['goodput req/s']} req/s)"],
        ["mean batch", rows["mean batch"]],
        ["preemptions", rows["preemptions"]],
        ["prefix hit rate", rows["prefix hit rate"]],
        ["KV split (time avg)", kv_split],
        ["KV peak used", f"{rows['KV peak used']}  ({rows['KV peak blocks']} blocks)"],
    ]
    profile_note = _profile_note(summary.get("cost_model") or {})
    if profile_note:
        bottom.append(["cost model", profile_note])
    text_blocks = [_align_left(top), _align(latency), _align_left(bottom)]
    return "\n\n".join(text_blocks)


def _profile_note(cost_model: Mapping[str, Any]) -> str:
    """For a profile-driven run: how many steps needed the analytic model somewhere."""
    if cost_model.get("kind") != "profile":
        return ""
    fallbacks = {k: v for k, v in (cost_model.get("fallback_steps") or {}).items() if v}
    steps = cost_model.get("steps", 0)
    if not fallbacks:
        return f"profile: all {steps:,} steps inside the profile's grid"
    parts = ", ".join(f"{part} {count:,}" for part, count in sorted(fallbacks.items()))
    return (
        f"profile: steps with a part outside the profile, predicted analytically: {parts} "
        f"(of {steps:,} steps)"
    )


def _limiter_breakdown(window: Mapping[str, Any]) -> str:
    """'max_num_seqs (87% of steps; none 8%, token_budget 5%, ...)'."""
    shares = window.get("limiters") or {}
    main = window.get("limited_by")
    if main is None:
        return "-"
    others = ", ".join(
        f"{name} {_pct(share)}"
        for name, share in sorted(shares.items(), key=lambda item: -(item[1] or 0))
        if name != main and share
    )
    return _limiter_text(window) + (f"; {others}" if others else "")


def _window_text(window: Mapping[str, Any]) -> str:
    if window.get("window_s") is None:
        return "-"
    return (
        f"{window['window_start_s']:.1f}-{window['window_end_s']:.1f} s "
        f"({window['window_s']:.1f} s, {window['arrivals']:,} arrivals at "
        f"{window['arrival_rate_rps']:.2f} req/s, {window['completions']:,} completions)"
    )


def _align_left(rows: Sequence[Sequence[str]]) -> str:
    width = max(len(row[0]) for row in rows)
    return "\n".join(f"{label.ljust(width)}  {value}" for label, value in rows)


def compare_table(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    """Headline metrics side by side, one column per run (in the mapping's order).
    Raises ValueError when `summaries` is empty."""
    if not summaries:
        raise ValueError("compare_table needs at least one summary")
    columns = {name: dict(summary_rows(s)) for name, s in summaries.items()}
    labels = [label for label, _ in summary_rows(next(iter(summaries.values())))]
    rows = [["metric", *columns]]
    rows += [[label, *(col[label] for col in columns.values())] for label in labels]
    return _align(rows)
