"""An imported run's folder: the layout ``pagesim observe`` writes, so ``pagesim
compare``, the report and ``validate --observed`` read it unchanged, plus the replay.

* ``summary.json``: the run's figures, from its requests (sim.output.summary, as for an
  observed run) or, when only aggregates were recorded, the client's whole-run figures;
  its ``recorded`` block names the format, every file read with its sha256, the engine
  settings, each stage's published figures and the notes of every conversion.
* ``requests.csv``, ``observed.csv``, ``tokens.csv``: per request and per token, when
  recorded (header only otherwise).
* ``scenario.yaml`` (with ``requests.jsonl`` and ``model.json`` beside it): the scenario
  that replays the run; ``pagesim run`` or ``validate --observed`` take it as it is.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sim.config.errors import ScenarioError
from sim.config.loader import validate_scenario
from sim.live.client import Attempt
from sim.live.observed import observed_summary, write_observed
from sim.live.replay import ReplayOptions, ReplayResult
from sim.output.benchmark import benchmark_key
from sim.output.files import write_outputs
from sim.output.steplog import StepLog
from sim.recorded import gpu_check
from sim.recorded.replay import MODEL_FILE, origin_of, replay_scenario, write_trace
from sim.recorded.run import METRICS, QUANTILES, RecordedRun, RecordError, StageFigures
from sim.run.folders import atomic_folder, run_metadata
from sim.workload.generate import generate_requests

SCENARIO_FILE = "scenario.yaml"


def import_folder(
    out: Path,
    run: RecordedRun,
    *,
    model: str | Path,
    hardware: Any,
    force: bool,
    argv,
    html: bool = True,
) -> dict[str, Any]:
    """Write ``run``'s folder at ``out`` (atomically) and return its summary. ``model``
    is a preset name or a config.json (copied in as model.json)."""
    with tempfile.TemporaryDirectory(prefix=".pagesim-import-") as staging:
        stage = Path(staging)
        section: Any = str(model)
        if isinstance(model, Path):
            shutil.copyfile(model, stage / MODEL_FILE)
            section = {"config": MODEL_FILE, "name": _model_name(run, model)}
        raw, notes = replay_scenario(run, name=out.name, model=section, hardware=hardware)
        if run.requests is not None:
            write_trace(stage, run)
            if run.hardware_guessed:
                ranked, sampled = gpu_check.fits(raw, run.requests, stage)
                notes.append(gpu_check.note(str(hardware), ranked, sampled))
        header = _header(run, notes)
        (stage / SCENARIO_FILE).write_text(header + yaml.safe_dump(raw, sort_keys=False))
        try:
            scenario = validate_scenario(raw, str(out / SCENARIO_FILE), base_dir=stage)
        except ScenarioError as err:  # validated before anything is written
            origin = origin_of(run, err.field)
            named = f"{origin}: " if origin else ""
            raise RecordError(
                f"{run.source}: {named}its replay would not be a valid scenario: {err}"
            ) from None
        block = recorded_block(run, notes)

        def copy_inputs(folder: Path) -> None:
            for item in stage.iterdir():
                shutil.copyfile(item, folder / item.name)

        if run.requests is not None:
            return _per_request(out, run, scenario, block, copy_inputs, force, argv, html)
        return _aggregate(out, run, scenario, block, copy_inputs, force, argv)


def _model_name(run: RecordedRun, config: Path) -> str:
    """The model's label in the replay: its repository's last part, or the file's stem."""
    name = (run.model or "").rstrip("/").split("/")[-1]
    return name or config.stem


def _header(run: RecordedRun, notes: list[str]) -> str:
    lines = [f"Replays the {run.format} run {run.source} (pagesim import-run).", ""]
    lines += [*run.notes, *notes]
    return "".join(f"# {line}\n" if line else "#\n" for line in lines)


def _per_request(out, run, scenario, block, copy_inputs, force, argv, html) -> dict:
    requests = generate_requests(scenario, scenario.model, rng=np.random.default_rng(0))
    attempts = _attempts(run)
    result = ReplayResult(attempts, float(np.nanmax(run.requests.end_s)), False)
    options = ReplayOptions(url=f"recorded {run.format}: {run.source}", model=run.model or "")
    summary = observed_summary(scenario, requests, attempts, result, options, (50.0, 90.0, 99.0))
    summary["recorded"] = block
    write_observed(
        out,
        scenario,
        requests,
        result,
        summary,
        html=html,
        force=force,
        argv=argv,
        extra=copy_inputs,
    )
    return summary


def _attempts(run: RecordedRun) -> list[Attempt]:
    """The recorded requests as a client's attempts, in send order (the trace's)."""
    r = run.requests
    order = np.argsort(r.send_s, kind="stable").tolist()
    attempts = []
    for req_id, i in enumerate(order):
        times = r.token_times[i].tolist() if r.token_times is not None else []
        ok = not r.error[i] and not math.isnan(r.end_s[i])
        attempts.append(
            Attempt(
                req_id,
                float(r.send_s[i]),
                float(r.send_s[i]),
                float(r.first_token_s[i]),
                float(r.end_s[i]),
                {0: times} if times else {},
                int(r.output_tokens[i]) if ok else None,
                int(r.prompt_tokens[i]),
                int(r.cached_tokens[i]) if r.cached_tokens[i] >= 0 else None,
                r.error[i],
                "",
            )
        )
    return attempts


def _aggregate(out, run, scenario, block, copy_inputs, force, argv) -> dict:
    """The folder of a run recorded as aggregates only (no request rows)."""
    summary = aggregate_summary(run, scenario)
    summary["recorded"] = block
    with atomic_folder(out, force=force) as partial:
        copy_inputs(partial)
        write_outputs(partial, [], StepLog(1), summary)
        scenario_json = scenario.model_dump(mode="json")
        (partial / "scenario.json").write_text(
            json.dumps(scenario_json, indent=2, sort_keys=True) + "\n"
        )
        metadata = run_metadata(scenario, argv)
        (partial / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    return summary


def aggregate_summary(run: RecordedRun, scenario) -> dict[str, Any]:
    """summary.json of an aggregate-only run: the client's whole-run figures (the summary
    file, or the stages pooled by request count where no summary was published)."""
    whole = run.summary or _pooled(run.stages)
    latency = {
        m: {q: v for q, v in whole.latency.get(m, {}).items() if q != "mean"}
        | {"mean": whole.latency.get(m, {}).get("mean")}
        for m in METRICS
    }
    sent = whole.sent
    return {
        "num_requests": sent,
        "num_finished": sent - whole.failed,
        "num_rejected": whole.failed,
        "rejected_reasons": {"failed (client)": whole.failed} if whole.failed else {},
        "ttft_s": latency["ttft_s"],
        "tpot_s": latency["tpot_s"],
        "e2e_s": latency["e2e_s"],
        "throughput_rps": whole.throughput_rps,
        # A client's output tokens per second counts its own re-tokenisation of the text
        # (inference-perf: special tokens the engine does not render are lost): not the
        # engine's, so not compared.
        "throughput_tok_s": None,
        "block_size": scenario.cache.block_size,
        "cost_model": {"kind": "observed", "endpoint": f"recorded {run.format}"},
        "observed": {"endpoint": f"recorded {run.format}: {run.source}", "errors": {}},
        # the ITL figures, where they were published, as a client's benchmark block
        "benchmark": {
            benchmark_key(stat, "itl"): 1e3 * value
            for stat in QUANTILES
            if (value := whole.latency.get("itl_s", {}).get(stat)) is not None
        },
    }


def _pooled(stages: tuple[StageFigures, ...]) -> StageFigures:
    """Request-weighted means of the stages (quantiles cannot be pooled: left out)."""
    sent = sum(s.sent for s in stages)
    latency = {}
    for metric in METRICS:
        rows = [
            (s.sent - s.failed, s.latency[metric]["mean"])
            for s in stages
            if "mean" in s.latency.get(metric, {})
        ]
        weight = sum(n for n, _ in rows)
        if rows and weight:
            latency[metric] = {"mean": sum(n * v for n, v in rows) / weight}
    return StageFigures(-1, None, None, sent, sum(s.failed for s in stages), latency)


def recorded_block(run: RecordedRun, notes: list[str]) -> dict[str, Any]:
    """summary.json's ``recorded``: source, files, engine, stages, notes."""
    return {
        "format": run.format,
        "source": run.source,
        "model": run.model,
        "hardware": run.hardware,
        "files": run.files,
        "engine": {k: v for k, v in dataclasses.asdict(run.engine).items() if v is not None},
        "request_timeout_s": run.request_timeout_s,
        "prefix_hit_rate": run.prefix_hit_rate,
        "clock": run.clock,
        "stages": [dataclasses.asdict(stage) for stage in run.stages],
        "summary": dataclasses.asdict(run.summary) if run.summary is not None else None,
        "notes": [*run.notes, *notes],
        "series": run.series,
    }
