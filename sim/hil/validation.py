"""How far is the simulator from the real backend? (``pagesim validate``)

The scenario's exact request trace (same seed, so the same arrivals, prompts and output
lengths) runs three times with the same policies:

(a) *measured*: hardware in the loop. Every step runs on the real paged backend and the
    SimPy clock advances by its measured time. A :class:`RecordingExecutor` keeps each
    step's shape and time.
(b) *calibrated*: the pure model with the :class:`~sim.costs.calibrated.CalibratedCostModel`.
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
minimum is kept, the same statistic the calibration fits (see :mod:`sim.hil.profiling`).
Steps with swaps or copy-on-write moves run once.

Outputs: ``validation.json`` (:func:`write_validation`), ``validation.html`` (predicted vs
measured step times with the identity line; TTFT/TPOT CDFs of the runs overlaid),
``steps.csv`` (every measured step with both predictions) and each run's usual files
under ``measured/``, ``calibrated/``, ``analytic/``.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from backend.step import Batch, BatchShape
from sim.costs.calibrated import FEATURES, CalibratedCostModel, Calibration, step_features
from sim.hil.fit import error_stats
from sim.run.build import analytic_executor
from sim.run.runner import simulate

#: The issue's targets on a CPU (per-step MAPE, p50 TTFT and TPOT relative error).
CPU_TARGET = 0.10


#: ... and on a GPU.
GPU_TARGET = 0.05


_LATENCIES = ("ttft_s", "tpot_s", "e2e_s")


_QUANTILES = ("p50", "p90", "p99")


_THROUGHPUTS = ("throughput_rps", "throughput_tok_s")


class MeasuredStep(NamedTuple):
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
        self.records: list[MeasuredStep] = []

    def execute(self, batch: Batch) -> float:
        seconds = self.inner.execute(batch)
        # Re-running transfers would move data twice; a forward pass is idempotent.
        if not batch.transfers:
            for _ in range(self.repeats - 1):
                seconds = min(seconds, self.inner.execute(batch))
        self.records.append(MeasuredStep(batch.shape(), float(seconds)))
        return seconds


ExecutorFactory = Callable[[Any, Any], Any]  # (scenario, allocator) -> Executor


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
                "measured": real,
                "predicted": model,
                "rel_error": _relative(model, real),
            }
    for metric in _THROUGHPUTS:
        real, model = measured[metric], predicted[metric]
        out[metric] = {"measured": real, "predicted": model, "rel_error": _relative(model, real)}
    return out


@dataclass
class Validation:
    """Everything a validation produced (in memory; see :func:`write_validation`)."""

    scenario: Any
    calibration: Calibration
    records: list[MeasuredStep]
    features: np.ndarray  # [step, FEATURES] of the records' shapes
    runs: dict[str, Any]  # "measured" / "calibrated" / "analytic" -> sim.run.RunResult
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
    backend, :func:`sim.costs.measured.build_torch_executor`, with ``cpu_threads`` torch
    threads on a CPU: use the count the calibration was profiled with). Raises
    ScenarioError for what cannot run (e.g. CUDA asked for but absent)."""
    from sim.costs.measured import build_torch_executor

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
    analytic = analytic_executor(scenario)
    load_before = _load_average()
    runs = {
        "measured": simulate(scenario, progress=progress, executor_factory=recording),
        "calibrated": simulate(scenario, executor_factory=lambda *_: calibrated),
        "analytic": simulate(scenario, executor_factory=lambda *_: analytic),
    }
    records = [record for recorder in recorders for record in recorder.records]
    features = np.array([step_features(*r.shape) for r in records]).reshape(-1, len(FEATURES))
    predictions = {
        "calibrated": calibration.predict(features),
        "analytic": np.array([analytic.predict(*r.shape) for r in records]),
    }
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
