"""Fit the analytic model's physical figures to recorded runs of one GPU
(``pagesim calibrate --observed RUN [RUN...]``, and the leave-one-out column of
``bench/recorded_runs.py``).

What is fitted, each inside its physical bounds, and what a run must have to tell it:

* ``hardware.sustained_bandwidth_fraction`` (0.3-1; the card's measured
  ``streaming_fraction`` moves with it): the decode step, so TPOT, at any load;
* ``hardware.gemm_efficiency`` (0.2-1): prefill, so TTFT of prompts that are computed
  (not prefix-cache hits) and the token budget's mixed steps;
* ``cost_model.params.interconnect_efficiency`` (0.02-1): runs with tensor parallelism,
  fitted after the GPU's own figures and with them held (those come from runs on one GPU
  only: a tensor-parallel step mixes the GPU's time with its link's, so without a run on
  one GPU they keep their datasheet values);
* the client's overhead over the engine (0-50 ms, runs timed by a benchmark client:
  sim.recorded.stages.CLIENT_OVERHEAD_S), a shift of TTFT and E2E fitted exactly for
  every candidate (no simulation).

A figure that moves the fit's loss by less than :data:`MIN_EFFECT` when changed by 10 %
is *not identifiable* from the runs given: it keeps its datasheet value and the result
says so. The CPU's per-step cost is not fitted: with vLLM's async scheduling it hides
behind the GPU and no run identifies it. Overloaded runs (more than 5 % of requests
failed) are left out of a fit: their figures are the survivors of a queue, set by the
timeout more than by the step time.

The loss is the mean over runs of the mean |log(simulated / recorded)| over every figure
(sim.recorded.stages.compare). Each run is simulated with its stages cut to
:data:`FIT_STAGE_S` seconds (long enough for its steady state; the bench replays whole
runs). The search is a deterministic pattern search in log space.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sim.recorded.fields import Count
from sim.recorded.files import parse_value, read_json, read_yaml
from sim.recorded.run import RecordError
from sim.recorded.stages import (
    compare,
    figures,
    read_requests_csv,
    recorded_stages,
    stage_windows,
)

#: Seconds of each stage simulated while fitting.
FIT_STAGE_S = 120.0
#: Below this change of the loss (for a 10 % change) a figure is not identifiable.
MIN_EFFECT = 0.002
#: Share of failed requests above which a run is overloaded (left out of fits).
OVERLOADED = 0.05


@dataclass(frozen=True)
class Param:
    section: str  # "hardware" or "params"
    low: float
    high: float
    needs: str = ""  # "tp": only runs with tensor parallelism identify it


PARAMS = {
    "sustained_bandwidth_fraction": Param("hardware", 0.3, 1.0),
    "gemm_efficiency": Param("hardware", 0.2, 1.0),
    "interconnect_efficiency": Param("params", 0.02, 1.0, "tp"),
}


@dataclass
class Fit:
    """A fit's result: the values, the client shift, the loss before and after, the
    runs it used (and why others were left out), what it could not identify."""

    values: dict[str, float]
    client_overhead_s: float
    loss_before: float
    loss_after: float
    runs: list[str]
    left_out: dict[str, str] = field(default_factory=dict)
    not_identified: dict[str, str] = field(default_factory=dict)
    evaluations: int = 0

    def overrides(self, scenario_hardware: dict[str, Any]) -> dict[str, Any]:
        """The calibration file's sections (sim.inputs.overrides)."""
        hardware = {k: v for k, v in self.values.items() if PARAMS[k].section == "hardware"}
        streaming = scenario_hardware.get("streaming_fraction")
        base = scenario_hardware.get("sustained_bandwidth_fraction", 0.9)
        if streaming and "sustained_bandwidth_fraction" in hardware:
            scaled = streaming * hardware["sustained_bandwidth_fraction"] / base
            hardware["streaming_fraction"] = min(scaled, 1.0)
        params = {k: v for k, v in self.values.items() if PARAMS[k].section == "params"}
        out: dict[str, Any] = {"hardware": hardware} if hardware else {}
        if params:
            out["cost_model"] = {"params": params}
        return out


def run_info(run: Path) -> dict[str, Any]:
    """What a fit needs to know of an imported run without simulating it. RecordError
    (one line naming the file and key) for a folder import-run did not write whole."""
    summary = _json_object(run / "summary.json")
    scenario = _json_object(run / "scenario.json")
    stages = recorded_stages(summary, str(run / "summary.json"))
    hardware = scenario.get("hardware")
    if not isinstance(hardware, dict) or not isinstance(hardware.get("name"), str):
        raise RecordError(f"{run / 'scenario.json'}: hardware: expected an object with a name")
    block = summary.get("recorded") or {}
    where = str(run / "summary.json")
    sent = sum(s.sent for s in stages) or parse_value(
        Count, summary.get("num_requests") or 0, where, "num_requests"
    )
    failed = (
        sum(s.failed for s in stages)
        if stages
        else parse_value(Count, summary.get("num_rejected") or 0, where, "num_rejected")
    )
    return {
        "gpu": hardware["name"],
        "tp": scenario.get("tensor_parallel", 1),
        "hardware": hardware,
        "client": block.get("clock", "client") == "client",
        "overloaded": bool(sent) and failed / sent > OVERLOADED,
    }


def check_run(run: Path) -> None:
    """Read everything a fit or a replay of ``run`` reads, so a damaged folder is one
    line before any simulation: summary.json, scenario.json, scenario.yaml (a valid
    scenario) and, for a run recorded request by request, requests.csv."""
    run_info(run)
    _replay_scenario(run)
    if not recorded_stages(_json_object(run / "summary.json")):
        read_requests_csv(run / "requests.csv")


def _json_object(path: Path) -> dict[str, Any]:
    data = read_json(path)  # RecordError for a file missing, not a file, or not JSON
    if not isinstance(data, dict):
        raise RecordError(f"{path}: expected a JSON object")
    return data


def _replay_scenario(run: Path, calibration: Path | None = None, stage_s: float | None = None):
    """The run's scenario.yaml, validated (with ``calibration`` and stages cut to
    ``stage_s``); RecordError naming the file for one that is missing or invalid."""
    from sim.config.errors import ScenarioError
    from sim.config.loader import validate_scenario

    path = run / "scenario.yaml"
    raw = read_yaml(path)  # RecordError for a file missing, not a file, or not YAML
    if not isinstance(raw, dict):
        raise RecordError(f"{path}: expected a scenario (a mapping)")
    if calibration is not None:
        raw["calibration"] = str(Path(calibration).resolve())
    arrival = (raw.get("workload") or {}).get("arrival") or {}
    if stage_s is not None and isinstance(arrival, dict) and arrival.get("kind") == "stages":
        for stage in arrival["stages"]:
            stage["duration_s"] = min(stage["duration_s"], stage_s)
        raw.setdefault("simulation", {})["duration_s"] = sum(
            s["duration_s"] for s in arrival["stages"]
        )
    try:
        return validate_scenario(raw, str(path), base_dir=run)
    except ScenarioError as err:
        raise RecordError(str(err)) from None


def simulate_run(run: Path, calibration: Path | None, stage_s: float | None):
    """(recorded figures, the simulation's Requests, its stage windows, timeout).
    ``calibration`` is a path from the caller's working directory (the run's own
    scenario resolves its paths from the run's folder, so it is made absolute here)."""
    from sim.output.requests import request_table
    from sim.recorded.stages import from_table
    from sim.run.runner import simulate

    summary = _json_object(run / "summary.json")
    scenario = _replay_scenario(run, calibration, stage_s)
    requests = from_table(request_table(simulate(scenario).outcomes))
    recorded = recorded_stages(summary) or figures(
        read_requests_csv(run / "requests.csv"), [(-1, -math.inf, math.inf)]
    )
    windows = stage_windows(scenario)
    return recorded, requests, windows, (summary.get("recorded") or {}).get("request_timeout_s")


def _loss_of(result, shift: float) -> float:
    recorded, requests, windows, timeout = result
    simulated = figures(requests, windows, timeout_s=timeout, shift_s=shift)
    if len(simulated) > 1 and len(recorded) == 1 and recorded[0].index == -1:
        simulated = simulated[:1]
    rows = [
        row for stage in compare(recorded, simulated)["stages"] for row in stage["rows"].values()
    ]
    return float(np.mean([abs(math.log(b / a)) for a, b, _ in rows if a > 0 and b > 0]))


def _best_shift(results, clients: list[bool]) -> tuple[float, float]:
    """The client overhead (0-50 ms) minimising the loss, and that loss."""
    if not any(clients):
        return 0.0, float(np.mean([_loss_of(r, 0.0) for r in results]))
    best = (math.inf, 0.0)
    for shift in np.arange(0.0, 0.0505, 0.001):
        losses = [_loss_of(r, shift if c else 0.0) for r, c in zip(results, clients)]
        best = min(best, (float(np.mean(losses)), float(shift)))
    return best[1], best[0]


def fit_runs(
    runs: Sequence[Path],
    *,
    jobs: int = 1,
    max_evaluations: int = 40,
    stage_s: float | None = FIT_STAGE_S,
    on_evaluation: Callable[[], None] | None = None,
) -> Fit:
    """Fit :data:`PARAMS` to ``runs`` (imported runs of one GPU; overloaded ones are left
    out). Raises ValueError when no run is left or the runs are of different GPUs.
    ``on_evaluation`` is called after each simulation of the runs (at most
    :func:`evaluation_budget` of them)."""
    infos = {run: run_info(run) for run in runs}
    gpus = {info["gpu"] for info in infos.values()}
    if len(gpus) > 1:
        raise ValueError(
            f"the runs are of {len(gpus)} GPUs ({', '.join(sorted(gpus))}): fit one GPU at a time"
        )
    left_out = {
        r.name: "overloaded: more than 5 % of requests failed"
        for r, i in infos.items()
        if i["overloaded"]
    }
    used = [r for r in runs if r.name not in left_out]
    if not used:
        raise ValueError("every run is overloaded: nothing identifies the step time")
    hardware = infos[used[0]]["hardware"]
    single = [r for r in used if infos[r]["tp"] == 1]
    grouped = [r for r in used if infos[r]["tp"] > 1]
    clients = {r: infos[r]["client"] for r in used}
    values = {n: _start_value(n, hardware) for n in PARAMS}
    not_identified: dict[str, str] = {}
    evaluations = 0
    # The GPU's own figures from runs on one GPU; the link from the others, with the
    # GPU's figures held: a TP run's step time mixes both and cannot tell them apart.
    stages = [
        ([n for n, p in PARAMS.items() if p.section == "hardware"], single),
        (["interconnect_efficiency"], grouped),
    ]
    for names, subset in stages:
        if not subset:
            why = (
                "no run on one GPU: a tensor-parallel step mixes the GPU's time with its link's"
                if names[0] != "interconnect_efficiency"
                else "only runs with tensor parallelism tell it"
            )
            not_identified.update(dict.fromkeys(names, why))
            continue
        search = _Search(
            subset, [clients[r] for r in subset], hardware, jobs, stage_s, on_evaluation
        )
        loss0, _ = search.loss(values)
        for name in list(names):
            nudged = {**values, name: _clip(name, values[name] * 1.1)}
            if abs(search.loss(nudged)[0] - loss0) < MIN_EFFECT:
                not_identified[name] = "a 10 % change moves the fit by less than 0.2 %"
                names.remove(name)
        values, _ = _pattern_search(search, values, names, loss0, max_evaluations)
        evaluations += search.evaluations
    fitted = {n: values[n] for n in PARAMS if n not in not_identified}
    overall = _Search(used, [clients[r] for r in used], hardware, jobs, stage_s, on_evaluation)
    before, _ = overall.loss({n: _start_value(n, hardware) for n in PARAMS})
    after, shift = overall.loss(values)
    return Fit(
        values=fitted,
        client_overhead_s=shift,
        loss_before=before,
        loss_after=after,
        runs=[r.name for r in used],
        left_out=left_out,
        not_identified=not_identified,
        evaluations=evaluations + overall.evaluations,
    )


def evaluation_budget(max_evaluations: int) -> int:
    """The most simulations of the runs :func:`fit_runs` makes: per stage, the start, a
    nudge of each figure, the search's budget and its last sweep's overshoot (one pass
    over the figures, both ways); then the fit's two losses over every run."""
    per_stage = 1 + len(PARAMS) + max(max_evaluations, 1 + len(PARAMS)) + 2 * len(PARAMS)
    return 2 * per_stage + 2


def _start_value(name: str, hardware: dict[str, Any]) -> float:
    from sim.catalog.cost_params import CostParams
    from sim.catalog.links import busbw_fraction

    if name == "interconnect_efficiency":
        return busbw_fraction(hardware.get("link") or "nvlink", 2)
    value = hardware.get(name)
    return float(value if value is not None else getattr(CostParams(), name, 0.9))


def _clip(name: str, value: float) -> float:
    param = PARAMS[name]
    return min(max(value, param.low), param.high)


def _pattern_search(search, start, names, loss, budget):
    values, step = dict(start), 0.2
    while names and step >= 0.01 and search.evaluations < budget:
        improved = False
        for name in names:
            for sign in (1, -1):
                trial = {**values, name: _clip(name, values[name] * math.exp(sign * step))}
                if trial[name] == values[name]:
                    continue
                trial_loss = search.loss(trial)[0]
                if trial_loss < loss - 1e-6:
                    values, loss, improved = trial, trial_loss, True
                    break
        if not improved:
            step /= 2
    return values, loss


class _Search:
    """Loss evaluations of one fit: each simulates every run with a candidate
    calibration written to a temporary file (memoised by value); ``on_evaluation`` is
    called after each new one."""

    def __init__(self, runs, clients, hardware, jobs, stage_s, on_evaluation=None):
        self.runs, self.clients, self.hardware = runs, clients, hardware
        self.jobs, self.stage_s = jobs, stage_s
        self.evaluations = 0
        self.on_evaluation: Callable[[], None] | None = on_evaluation
        self._seen: dict[tuple, tuple[float, float]] = {}

    def loss(self, values: dict[str, float]) -> tuple[float, float]:
        key = tuple(sorted((k, round(v, 6)) for k, v in values.items()))
        if key not in self._seen:
            self.evaluations += 1
            fit = Fit(values, 0.0, 0.0, 0.0, [])
            with tempfile.TemporaryDirectory() as scratch:
                path = Path(scratch) / "calibration.yaml"
                path.write_text(yaml.safe_dump(fit.overrides(self.hardware)))
                results = _map(simulate_run, self.runs, path, self.stage_s, self.jobs)
            shift, loss = _best_shift(results, self.clients)
            self._seen[key] = (loss, shift)
            if self.on_evaluation is not None:
                self.on_evaluation()
        loss, shift = self._seen[key]
        return loss, shift


def _map(function: Callable, runs, calibration, stage_s, jobs):
    if jobs <= 1 or len(runs) == 1:
        return [function(run, calibration, stage_s) for run in runs]
    with ProcessPoolExecutor(max_workers=min(jobs, len(runs))) as pool:
        return list(pool.map(function, runs, [calibration] * len(runs), [stage_s] * len(runs)))


def write_calibration(fit: Fit, hardware: dict[str, Any], path: Path, command: str) -> None:
    """The calibration file a scenario names (sim.inputs.overrides)."""
    sections = fit.overrides(hardware)
    kept = ("runs", "left_out", "client_overhead_s", "loss_before", "loss_after", "not_identified")
    values = {name: getattr(fit, name) for name in kept}
    sections["fit"] = {"command": command} | {
        name: round(value, 4) if isinstance(value, float) else value
        for name, value in values.items()
    }
    path.write_text(yaml.safe_dump(sections, sort_keys=False))


def leave_one_out(
    runs: Sequence[Path],
    replay: Callable,
    *,
    jobs: int = 1,
    max_evaluations: int = 16,
    stage_s: float = 60.0,
) -> list[dict]:
    """For each run: fit on the other runs of its GPU, replay it with that fit (``replay(run,
    overrides, calibration_path, client_shift)`` as bench/recorded_runs.py gives it)."""
    by_gpu: dict[str, list[Path]] = {}
    for run in runs:
        by_gpu.setdefault(run_info(run)["gpu"], []).append(run)
    results = []
    for run in runs:
        others = [r for r in by_gpu[run_info(run)["gpu"]] if r != run]
        try:
            fit = fit_runs(others, jobs=jobs, max_evaluations=max_evaluations, stage_s=stage_s)
        except ValueError as err:
            result = replay(run)
            result["note"] = f"not calibrated: {err}" if others else "no other run of this GPU"
            results.append(result)
            continue
        with tempfile.TemporaryDirectory() as scratch:
            path = Path(scratch) / "calibration.yaml"
            write_calibration(fit, run_info(run)["hardware"], path, "leave-one-out")
            result = replay(run, (), path, fit.client_overhead_s)
        result["note"] = (
            f"fitted on {len(fit.runs)} run(s): "
            + ", ".join(f"{k} {v:.3g}" for k, v in fit.values.items())
            + (f", client {1e3 * fit.client_overhead_s:.0f} ms")
        )
        results.append(result)
    return results
