"""How far is the simulator from the real backend? (``pagesim validate``)

The scenario's exact request trace (same seed, so the same arrivals, prompts and output
lengths) runs three times with the same policies:

(a) *measured*: hardware in the loop. Every step runs on the real paged backend and the
    SimPy clock advances by its measured time. A :class:`RecordingExecutor` keeps each
    step's shape and time.
(b) *calibrated*: the pure model with the :class:`~sim.calibration.CalibratedCostModel`.
(c) *analytic*: the pure model with the uncalibrated roofline model, to show what
    calibration buys.

Two kinds of error are reported. *Per step*: both cost models' predictions for each step
shape (a) actually executed, against its measured time (MAPE, p50/p90 absolute
percentage error). *End to end*: relative error ``(model - measured) / measured`` of
TTFT, TPOT and E2E at p50/p90/p99 and of throughput, (b) and (c) against (a). Runs (b)
and (c) schedule their own steps, so their step sequence drifts from (a)'s as soon as a
predicted time differs; that is exactly the error a user of the simulator would see.

Measuring a step: by default a step without block moves runs ``step_repeats`` (5) times
(its forward pass is idempotent: it rewrites the same K/V into the same slots) and the
minimum is kept, the same statistic the calibration fits (see :mod:`sim.profiling`).
Steps with swaps or copy-on-write moves run once.

Outputs: ``validation.json`` (:func:`write_validation`), ``validation.html`` (predicted vs
measured step times with the identity line; TTFT/TPOT CDFs of the runs overlaid),
``steps.csv`` (every measured step with both predictions) and each run's usual files
under ``measured/``, ``calibrated/``, ``analytic/``.
"""

from __future__ import annotations

import csv
import datetime
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from backend.step import Batch, BatchShape
from sim import runner
from sim.calibration import FEATURES, CalibratedCostModel, Calibration, error_stats, step_features

__all__ = [
    "RecordingExecutor",
    "StepRecord",
    "Validation",
    "end_to_end_errors",
    "run_validation",
    "write_validation",
]

#: The issue's targets on a CPU (per-step MAPE, p50 TTFT and TPOT relative error).
CPU_TARGET = 0.10
#: ... and on a GPU.
GPU_TARGET = 0.05

_LATENCIES = ("ttft_s", "tpot_s", "e2e_s")
_QUANTILES = ("p50", "p90", "p99")
_THROUGHPUTS = ("throughput_rps", "throughput_tok_s")


# --------------------------------------------------------------------------------------
# Recording the measured run
# --------------------------------------------------------------------------------------


class StepRecord(NamedTuple):
    """One executed step: its shape (enough to re-predict it) and measured seconds."""

    shape: BatchShape
    measured_s: float


class RecordingExecutor:
    """Wraps a real executor: runs each step (``repeats`` times if it moves no blocks,
    keeping the minimum), records it, returns the measured seconds. Mutates ``records``
    and whatever the wrapped executor mutates."""

    def __init__(self, inner, *, repeats: int = 1):
        if repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {repeats}")
        self.inner = inner
        self.repeats = repeats
        self.records: list[StepRecord] = []

    def execute(self, batch: Batch) -> float:
        seconds = self.inner.execute(batch)
        moves = len(batch.swap_out) + len(batch.swap_in) + len(batch.copies)
        if not moves:  # re-running moves would move data twice; a forward pass is idempotent
            for _ in range(self.repeats - 1):
                seconds = min(seconds, self.inner.execute(batch))
        self.records.append(StepRecord(batch.shape(), float(seconds)))
        return seconds


# --------------------------------------------------------------------------------------
# Running a scenario with a chosen executor
# --------------------------------------------------------------------------------------

ExecutorFactory = Callable[[Any, Any], Any]  # (scenario, allocator) -> Executor


# --------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------


def _relative(predicted, measured) -> float | None:
    if predicted is None or measured is None or not measured:
        return None
    return float((predicted - measured) / measured)


def end_to_end_errors(measured: dict, predicted: dict) -> dict[str, dict[str, float | None]]:
    """``{"ttft_s.p50": {"measured", "predicted", "rel_error"}, ...}`` for TTFT, TPOT and
    E2E at p50/p90/p99 and both throughputs, from two summary.json dicts."""
    out = {}
    for metric in _LATENCIES:
        for quantile in _QUANTILES:
            real, model = measured[metric][quantile], predicted[metric][quantile]
            out[f"{metric}.{quantile}"] = {
                "measured": real, "predicted": model, "rel_error": _relative(model, real)
            }  # fmt: skip
    for metric in _THROUGHPUTS:
        real, model = measured[metric], predicted[metric]
        out[metric] = {"measured": real, "predicted": model, "rel_error": _relative(model, real)}
    return out


@dataclass
class Validation:
    """Everything a validation produced (in memory; see :func:`write_validation`)."""

    scenario: Any
    calibration: Calibration
    records: list[StepRecord]
    features: np.ndarray  # [step, FEATURES] of the records' shapes
    runs: dict[str, Any]  # "measured" / "calibrated" / "analytic" -> sim.runner.RunResult
    predictions: dict[str, np.ndarray]  # model name -> per-step predicted seconds
    step_repeats: int
    report: dict[str, Any] = field(default_factory=dict)
    #: 1-minute load average before and after the runs (None where the OS has none)
    load_average: tuple[float | None, float | None] = (None, None)

    @property
    def measured_s(self) -> np.ndarray:
        return np.array([record.measured_s for record in self.records])


def run_validation(
    scenario,
    calibration: Calibration,
    *,
    step_repeats: int = 5,
    cpu_threads: int = 1,
    progress: bool = False,
    measured_factory: ExecutorFactory | None = None,
) -> Validation:
    """Run (a), (b), (c) of the module docstring and compute the report.

    ``measured_factory`` builds the real executor for (a) (default: the scenario's torch
    backend, :func:`sim.realbackend.build_torch_executor`, with ``cpu_threads`` torch
    threads on a CPU: use the count the calibration was profiled with). Raises
    ScenarioError for what cannot run (e.g. CUDA asked for but absent)."""
    from sim.realbackend import build_torch_executor

    def real_factory(scenario_, allocator):
        if measured_factory is not None:
            return measured_factory(scenario_, allocator)
        return build_torch_executor(scenario_, allocator, cpu_threads=cpu_threads)

    recorders: list[RecordingExecutor] = []

    def recording(scenario_, allocator):
        recorder = RecordingExecutor(real_factory(scenario_, allocator), repeats=step_repeats)
        recorders.append(recorder)
        return recorder

    calibrated = CalibratedCostModel(calibration)
    analytic = runner.analytic_executor(scenario)
    load_before = _load_average()
    runs = {
        "measured": runner.simulate(scenario, progress=progress, executor_factory=recording),
        "calibrated": runner.simulate(scenario, executor_factory=lambda *_: calibrated),
        "analytic": runner.simulate(scenario, executor_factory=lambda *_: analytic),
    }
    records = [record for recorder in recorders for record in recorder.records]
    features = np.array([step_features(*r.shape) for r in records]).reshape(-1, len(FEATURES))
    predictions = {
        "calibrated": calibration.predict(features),
        "analytic": np.array([
            analytic.predict(*r.shape)
            for r in records
        ]),
    }  # fmt: skip
    validation = Validation(
        scenario, calibration, records, features, runs, predictions, step_repeats
    )
    validation.load_average = (load_before, _load_average())
    validation.report = build_report(validation)
    return validation


def _load_average() -> float | None:
    """The 1-minute load average: other work on the machine inflates measured steps."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def build_report(validation: Validation) -> dict[str, Any]:
    """The content of validation.json (JSON-ready)."""
    scenario, runs = validation.scenario, validation.runs
    measured = validation.measured_s
    device = scenario.backend.device
    target = GPU_TARGET if device == "cuda" else CPU_TARGET
    per_step = {name: error_stats(pred, measured) for name, pred in validation.predictions.items()}
    end_to_end = {
        name: end_to_end_errors(runs["measured"].summary, runs[name].summary)
        for name in ("calibrated", "analytic")
    }
    calibrated = end_to_end["calibrated"]
    checks = {
        "per_step_mape": per_step["calibrated"]["mape"],
        "ttft_p50_rel_error": calibrated["ttft_s.p50"]["rel_error"],
        "tpot_p50_rel_error": calibrated["tpot_s.p50"]["rel_error"],
    }
    return {
        "scenario": scenario.name,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": device,
        "dtype": scenario.backend.dtype,
        "model": scenario.model.name,
        "measurement": {
            "step_repeats": validation.step_repeats,
            "statistic": "min",
            "load_average_1min": list(validation.load_average),
            "cpu_count": os.cpu_count(),
        },
        "calibration": {
            "coefficients": validation.calibration.coefficients,
            "fit": validation.calibration.fit,
            "profile": validation.calibration.profile,
        },
        "runs": {name: _run_facts(result) for name, result in runs.items()},
        "num_measured_steps": int(measured.size),
        "per_step": per_step,
        "per_step_by_kind": _errors_by_kind(validation),
        "end_to_end": end_to_end,
        "target": {
            "bound": target,
            "values": checks,
            "met": all(v is not None and abs(v) <= target for v in checks.values()),
        },
    }


def _step_kind(shape: BatchShape) -> str:
    chunks, decodes = len(shape.chunks), len(shape.decode_context_lens)
    if chunks and decodes:
        return "mixed"
    if chunks or decodes:
        return "prefill-only" if chunks else "decode-only"
    return "moves-only"  # only swaps / copy-on-write this step


def _errors_by_kind(validation: Validation) -> dict[str, dict[str, float]]:
    """The calibrated model's mean signed relative error and step count per step kind
    (decode-only, prefill-only, mixed, moves-only): where the fit is off, and which way."""
    kinds = np.array([_step_kind(record.shape) for record in validation.records])
    measured, predicted = validation.measured_s, validation.predictions["calibrated"]
    out = {}
    for kind in ("decode-only", "prefill-only", "mixed", "moves-only"):
        rows = kinds == kind
        if rows.any():
            error = (predicted[rows] - measured[rows]) / measured[rows]
            out[kind] = {"steps": int(rows.sum()), "mean_rel_error": float(error.mean())}
    return out


def _run_facts(result) -> dict[str, Any]:
    summary = result.summary
    facts = {key: summary[key] for key in _THROUGHPUTS + ("num_finished", "num_rejected")}
    facts.update({key: summary[key] for key in _LATENCIES})
    facts.update(num_steps=result.num_steps, wall_s=result.wall_s)
    return facts


# --------------------------------------------------------------------------------------
# Text table, files
# --------------------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:+.1f}%"


def _ms(seconds: float | None) -> str:
    """A latency for the table (a run with no multi-token output has no TPOT)."""
    return "n/a" if seconds is None else f"{1e3 * seconds:.2f} ms"


def _abs_pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def format_table(report: dict[str, Any]) -> str:
    """The validation table (markdown; also readable as plain text)."""
    lines = [
        "| error vs measured | calibrated | analytic |",
        "| --- | ---: | ---: |",
    ]
    per_step = report["per_step"]
    for key, label in (("mape", "per-step MAPE"), ("p90_ape", "per-step p90 APE")):
        values = [_abs_pct(per_step[name][key]) for name in ("calibrated", "analytic")]
        lines.append(f"| {label} | {values[0]} | {values[1]} |")
    e2e = report["end_to_end"]
    for key in e2e["calibrated"]:
        values = [_pct(e2e[name][key]["rel_error"]) for name in ("calibrated", "analytic")]
        lines.append(f"| {key} | {values[0]} | {values[1]} |")
    target = report["target"]
    verdict = "met" if target["met"] else "NOT met"
    lines.append(
        f"\n{report['num_measured_steps']} measured steps on {report['device']}; target "
        f"(per-step MAPE and p50 TTFT/TPOT within {100 * target['bound']:.0f}%): {verdict}"
    )
    kinds = report["per_step_by_kind"]
    lines.append(
        "calibrated mean per-step error by step kind: "
        + ", ".join(f"{k} {_pct(v['mean_rel_error'])} ({v['steps']})" for k, v in kinds.items())
    )
    measured, fit = report["runs"]["measured"], report["calibration"]["fit"]
    heldout = fit.get("heldout_mape")
    lines.append(
        f"{report['date']}: measured TTFT p50 {_ms(measured['ttft_s']['p50'])}, "
        f"TPOT p50 {_ms(measured['tpot_s']['p50'])}; calibration held-out MAPE "
        f"{_abs_pct(heldout)} ({fit.get('heldout_rows', '?')} of {fit.get('rows', '?')} "
        f"shapes); load average {report['measurement']['load_average_1min']}"
    )
    return "\n".join(lines)


def write_validation(validation: Validation, out_dir: str | Path, *, html: bool = True) -> Path:
    """Write validation.json, steps.csv, validation.html (unless ``html`` is false) and
    each run's files (no per-run HTML) into ``out_dir``; returns the directory."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "validation.json").write_text(
        json.dumps(validation.report, indent=2, sort_keys=True, allow_nan=False) + "\n"
    )
    _write_steps(validation, out / "steps.csv")
    for name, result in validation.runs.items():
        runner.write_run(result, validation.scenario, out / name, html=False)
    if html:
        write_html(validation, out / "validation.html")
    return out


def _write_steps(validation: Validation, path: Path) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", *FEATURES, "measured_s", "calibrated_s", "analytic_s"])
        calibrated, analytic = (
            validation.predictions["calibrated"],
            validation.predictions["analytic"],
        )
        for index, record in enumerate(validation.records):
            writer.writerow(
                [index, *(f"{v:g}" for v in validation.features[index]),
                 f"{record.measured_s:.9g}",
                 f"{calibrated[index]:.9g}", f"{analytic[index]:.9g}"]
            )  # fmt: skip


# --------------------------------------------------------------------------------------
# HTML page
# --------------------------------------------------------------------------------------

_COLOURS = {"measured": "#222222", "calibrated": "#1f77b4", "analytic": "#d62728"}


def write_html(validation: Validation, path: str | Path) -> Path:
    """One self-contained page (plotly.js embedded once, works offline): the table,
    predicted vs measured step times, TTFT and TPOT CDFs of the three runs."""
    import plotly.io as pio

    figures = [_scatter_figure(validation), _cdf_figure(validation, "ttft_s", "TTFT"),
               _cdf_figure(validation, "tpot_s", "TPOT")]  # fmt: skip
    divs = [
        pio.to_html(fig, include_plotlyjs=(i == 0), full_html=False, div_id=f"figure{i}")
        for i, fig in enumerate(figures)
    ]
    table = format_table(validation.report).replace("<", "&lt;")
    title = f"pagesim validation: {validation.scenario.name}"
    page = (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title></head>"
        f"<body style='font-family:sans-serif;max-width:1100px;margin:auto'><h1>{title}</h1>"
        f"<pre>{table}</pre>{''.join(divs)}</body></html>\n"
    )
    path = Path(path)
    path.write_text(page)
    return path


def _scatter_figure(validation: Validation):
    import plotly.graph_objects as go

    from sim.report import downsample_indices

    measured_ms = validation.measured_s * 1e3
    keep = downsample_indices(measured_ms.size)
    fig = go.Figure()
    for name, predicted in validation.predictions.items():
        fig.add_trace(go.Scattergl(
            x=measured_ms[keep], y=predicted[keep] * 1e3, mode="markers", name=name,
            marker={"size": 5, "opacity": 0.6, "color": _COLOURS[name]},
        ))  # fmt: skip
    every = np.concatenate([measured_ms] + [p * 1e3 for p in validation.predictions.values()])
    positive = every[every > 0]
    if positive.size:
        low, high = float(positive.min()), float(positive.max())
        fig.add_trace(go.Scatter(x=[low, high], y=[low, high], mode="lines", name="identity",
                                 line={"color": "grey", "dash": "dash"}))  # fmt: skip
    fig.update_layout(
        title="Step time: predicted vs measured (each step the measured run executed)",
        xaxis={"title": "measured (ms)", "type": "log"},
        yaxis={"title": "predicted (ms)", "type": "log"},
        template="plotly_white", height=520,
    )  # fmt: skip
    return fig


def _cdf_figure(validation: Validation, column: str, label: str):
    import plotly.graph_objects as go

    from sim.metrics import request_table

    fig = go.Figure()
    for name, result in validation.runs.items():
        values = np.sort(request_table(result.requests)[column])
        values = values[~np.isnan(values)] * 1e3
        if values.size:
            fraction = np.arange(1, values.size + 1) / values.size
            fig.add_trace(go.Scatter(x=values, y=fraction, mode="lines", name=name,
                                     line={"color": _COLOURS[name], "shape": "hv"}))  # fmt: skip
    fig.update_layout(
        title=f"{label} CDF of the three runs", xaxis={"title": f"{label} (ms)"},
        yaxis={"title": "fraction of requests", "range": [0, 1]},
        template="plotly_white", height=420,
    )  # fmt: skip
    return fig
