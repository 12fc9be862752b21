"""A simulation against a recorded run, figure by figure and stage by stage.

Both sides are reduced to the same :class:`~sim.recorded.run.StageFigures`:

* a simulation: from its request table (sim.output.requests), each request in the
  stage it arrived in (the stages of a ``stages`` arrival; one whole-run stage, index
  -1, otherwise); TTFT, TPOT ((finish - first token) / (output tokens - 1)) and E2E
  over the requests that finished, throughput as completed requests over the span from
  the stage's first arrival to its last request's end, a success's finish or a client's
  giving up (inference-perf's definition);
* a recorded run: its stages' published figures, or the same reduction of its requests
  (an imported run's requests.csv) when it was recorded request by request.

A request a client would have given up on (E2E beyond the recorded run's timeout)
counts as failed on the simulated side, as it did on the real one.

A recording made by a benchmark client (``clock: client``) times each request from its
send over HTTP; the simulation times it from the engine's queue. :data:`CLIENT_OVERHEAD_S`
is added to the simulated first token and finish of such runs: what a client sees on top
of the engine (HTTP, the API server's tokenisation and streaming): 8.4-12.2 ms, median 11,
of client TTFT over vLLM's own TTFT metric in six rounds against a local vLLM 0.28 server
(vllm-project/vllm#54628).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from pydantic import ValidationError

from sim.config.errors import format_validation_error
from sim.recorded.run import METRICS, QUANTILES, RecordError, StageFigures

#: Seconds a benchmark client adds to TTFT and E2E over the engine's own (module doc).
CLIENT_OVERHEAD_S = 11e-3

#: The figures compared, in table order: (metric, quantile), then throughput.
COMPARED = tuple((m, q) for m in ("ttft_s", "tpot_s", "e2e_s") for q in QUANTILES)


class Requests(NamedTuple):
    """What the reduction reads per request (float64 seconds; NaN: did not happen)."""

    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    output_tokens: np.ndarray


def from_table(table: dict[str, np.ndarray]) -> Requests:
    """The columns of a request table (sim.output.requests.request_table or a read
    requests.csv), unfinished and rejected requests with NaN finish."""
    finish = np.where(table["rejected_reason"] == "", table["finish_s"], np.nan)
    return Requests(
        table["arrival_s"],
        table["first_token_s"],
        finish,
        table["output_tokens"].astype(np.float64),
    )


def figures(
    requests: Requests,
    windows: list[tuple[int, float, float]],
    timeout_s: float | None = None,
    shift_s: float = 0.0,
) -> list[StageFigures]:
    """One StageFigures per ``(index, start, end)`` window of arrival times; ``shift_s``
    is added to every first token and finish (a client's overhead)."""
    if shift_s:
        requests = requests._replace(
            first_token_s=requests.first_token_s + shift_s, finish_s=requests.finish_s + shift_s
        )
    out = []
    for index, start, end in windows:
        inside = (requests.arrival_s >= start) & (requests.arrival_s < end)
        out.append(_stage(requests, inside, index, timeout_s))
    return out


def _stage(r: Requests, inside: np.ndarray, index: int, timeout_s) -> StageFigures:
    e2e = r.finish_s - r.arrival_s
    ok = inside & np.isfinite(e2e)
    if timeout_s is not None:
        ok &= e2e <= timeout_s
    ttft = (r.first_token_s - r.arrival_s)[ok]
    multi = ok & (r.output_tokens >= 2)
    tpot = ((r.finish_s - r.first_token_s) / np.maximum(r.output_tokens - 1, 1))[multi]
    latency = {
        name: _quantiles(values)
        for name, values in (("ttft_s", ttft), ("tpot_s", tpot), ("e2e_s", e2e[ok]))
    }
    # The span ends with the stage's last request to end: a success's finish, or the
    # moment a client gave up (inference-perf's throughput divides by it).
    ends = np.where(
        np.isfinite(r.finish_s),
        r.finish_s,
        r.arrival_s + (timeout_s if timeout_s is not None else np.nan),
    )
    ends = ends[inside & np.isfinite(ends)]
    span = (np.max(ends) - np.min(r.arrival_s[inside])) if ok.any() else 0.0
    sent = int(inside.sum())
    return StageFigures(
        index=index,
        rate_rps=None,
        duration_s=None,
        sent=sent,
        failed=sent - int(ok.sum()),
        latency={k: v for k, v in latency.items() if v},
        throughput_rps=float(ok.sum() / span) if span > 0 else None,
    )


def _quantiles(values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return {}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"mean": float(values.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def stage_windows(scenario) -> list[tuple[int, float, float]]:
    """The scenario's stages as ``(index, start, end)``, or one whole-run window."""
    arrival = scenario.workload.arrival
    if getattr(arrival, "kind", None) == "stages":
        starts = arrival.stage_starts()
        return [
            (i, float(s), float(s + st.duration_s))
            for i, (s, st) in enumerate(zip(starts, arrival.stages, strict=True))
        ]
    return [(-1, -np.inf, np.inf)]


def compare(recorded: list[StageFigures], simulated: list[StageFigures]) -> dict[str, Any]:
    """``{"stages": [{index, rows: {figure: (recorded, simulated, error)}}], "mape": ...}``:
    each figure both sides have, its relative error (simulated - recorded) / recorded, and
    the run's MAPE over them all (every stage, every figure)."""
    by_index = {s.index: s for s in simulated}
    stages, errors = [], []
    for real in recorded:
        model = by_index.get(real.index)
        if model is None:
            continue
        rows = {}
        for metric, quantile in COMPARED:
            a = real.latency.get(metric, {}).get(quantile)
            b = model.latency.get(metric, {}).get(quantile)
            if a and b is not None:
                rows[f"{metric}.{quantile}"] = (a, b, (b - a) / a)
        if real.throughput_rps and model.throughput_rps is not None:
            a, b = real.throughput_rps, model.throughput_rps
            rows["throughput_rps"] = (a, b, (b - a) / a)
        stages.append({"index": real.index, "rows": rows})
        errors += [abs(row[2]) for row in rows.values()]
    return {"stages": stages, "mape": float(np.mean(errors)) if errors else None}


def recorded_stages(summary: dict[str, Any], where: str = "summary.json") -> list[StageFigures]:
    """The published stage figures of an imported run's summary.json (none for a run
    recorded request by request). RecordError (one line naming ``where`` and the key)
    for a block that is not what import-run writes."""
    block = summary.get("recorded") or {}
    if not isinstance(block, dict):
        raise RecordError(f"{where}: recorded: expected an object, got {_kind(block)}")
    rows = block.get("stages") or []
    if not isinstance(rows, list):
        raise RecordError(f"{where}: recorded.stages: expected a list, got {_kind(rows)}")
    return [_stage_row(row, where, f"recorded.stages[{i}]") for i, row in enumerate(rows)]


def _stage_row(row: Any, where: str, at: str) -> StageFigures:
    if not isinstance(row, dict):
        raise RecordError(f"{where}: {at}: expected an object, got {_kind(row)}")
    try:
        return StageFigures(**{"rate_rps": None, "duration_s": None, **row})
    except ValidationError as err:
        raise RecordError(format_validation_error(err, where, row, at)) from None
    except TypeError as err:  # a key that is not a stage figure
        raise RecordError(f"{where}: {at}: {err}") from None


def _kind(value: Any) -> str:
    return type(value).__name__ if value is not None else "null"


__all__ = [
    "CLIENT_OVERHEAD_S",
    "COMPARED",
    "METRICS",
    "Requests",
    "compare",
    "figures",
    "from_table",
    "read_requests_csv",
    "recorded_stages",
    "series_means",
    "stage_windows",
]


#: The requests.csv columns the reduction reads.
_REQUEST_COLUMNS = ("arrival_s", "first_token_s", "finish_s", "output_tokens", "rejected_reason")


def read_requests_csv(path) -> Requests:
    """The reduction's columns from a run folder's requests.csv (a simulated or an
    imported run: the same columns). RecordError (one line naming the file and line)
    for a file that is missing, not UTF-8 text, lacks a column, has a short row or a
    cell that is not a number."""
    import csv

    from sim.inputs.textfile import reading

    with reading(path, RecordError), open(path, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        try:
            rows = list(reader)
        except csv.Error as err:
            raise RecordError(f"{path}:{reader.line_num}: not CSV: {err}") from None
        header = reader.fieldnames or []
    missing = [c for c in _REQUEST_COLUMNS if c not in header]
    if missing:
        raise RecordError(f"{path}: no column {missing[0]!r}")
    for line, row in enumerate(rows, start=2):
        if None in row.values():  # fewer cells than the header (a file cut short)
            raise RecordError(f"{path}:{line}: {len(row) - 1} fields, expected {len(header)}")

    def floats(name: str) -> np.ndarray:
        values = []
        for line, row in enumerate(rows, start=2):
            text = row[name]
            try:
                values.append(float(text) if text not in ("", "nan") else np.nan)
            except ValueError:
                raise RecordError(
                    f"{path}:{line}: {name}: expected a number, got {text[:40]!r}"
                ) from None
        return np.array(values, dtype=np.float64)

    rejected = np.array([row["rejected_reason"] != "" for row in rows], dtype=bool)
    finish = np.where(rejected, np.nan, floats("finish_s"))
    return Requests(floats("arrival_s"), floats("first_token_s"), finish, floats("output_tokens"))


def series_means(steps, recorded: dict[str, list[float]]) -> dict[str, tuple[float, float]]:
    """The time-averaged running and waiting requests and generated tokens a second, over
    the span the recorded series covers: ``{name: (recorded, simulated)}``. ``steps`` is
    a run's StepLog (one replica)."""
    t = np.asarray(recorded["t"], dtype=np.float64)
    start = steps.column("time_s")
    duration = steps.column("duration_s")
    end = min(float(t.max()), float((start + duration).max())) if len(start) else 0.0
    inside = start < end
    weights = np.minimum(duration, np.maximum(end - start, 0.0))[inside]
    out = {}
    for name, column in (("running", "batch_size"), ("waiting", "queue_len")):
        values = steps.column(column)[inside].astype(np.float64)
        simulated = float(np.average(values, weights=weights)) if weights.sum() else 0.0
        real = np.asarray(recorded[name], dtype=np.float64)[t <= end]
        out[name] = (float(real.mean()) if real.size else 0.0, simulated)
    tokens = steps.column("num_decode_tokens")[inside].sum()
    out["gen_tok_s"] = (
        float(np.mean(np.asarray(recorded["gen_tok_s"])[t <= end])),
        float(tokens / end) if end else 0.0,
    )
    return out
