"""The scenario that replays a recorded run: the same requests, engine and deployment.

* The workload: a ``requests-jsonl`` trace of the recorded requests (send times, prompt
  and output lengths, and which of them sent the same prompt) when they were recorded
  one by one; otherwise the client generator's own settings (:attr:`RecordedRun.workload`:
  staged arrival rates, the prompt pool and shared prefixes), re-drawn with the seed.
* The engine: its arguments mapped by :mod:`sim.recorded.engine_args`.
* The model: a config.json copied beside the scenario (``model.json``), or a preset.
* The GPU: the hardware preset the run names or the import was given.

A successful request's output length is what the engine generated (the format's module
says how it was counted); a failed one keeps what it streamed (at least 1 token).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from sim.recorded.engine_args import SCENARIO_FIELDS, dtype_bytes, scenario_sections
from sim.recorded.run import RecordedRun, RecordError

TRACE_FILE = "requests.jsonl"
MODEL_FILE = "model.json"


def replay_scenario(
    run: RecordedRun, *, name: str, model: dict[str, Any] | str, hardware: str | dict[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """(scenario mapping, notes) replaying ``run``; ``model`` is a preset name or a
    ``model`` section (``{config: model.json, ...}``)."""
    sections, notes = scenario_sections(run.engine)
    model_section: Any = model
    if isinstance(model, dict):
        model_section = dict(model)
        if run.engine.max_model_len:
            model_section["max_model_len"] = run.engine.max_model_len
        width = dtype_bytes(run.engine)
        if width is not None:
            model_section["dtype_bytes"] = width
    scenario: dict[str, Any] = {
        "name": name,
        "description": f"replay of the {run.format} run {run.source}",
        "model": model_section,
        "hardware": hardware,
        **sections,
    }
    if run.requests is not None:
        arrival = {"kind": "trace", "format": "requests-jsonl", "path": TRACE_FILE}
        if run.requests.prefix_blocks is not None:
            arrival["hash_block_tokens"] = run.requests.prefix_block_tokens
        scenario["workload"] = {"arrival": arrival}
        scenario["simulation"] = {"num_requests": None, "seed": 0}
    elif run.workload is not None:
        scenario["workload"] = run.workload
        scenario["simulation"] = {"seed": 0}
        if run.num_requests is not None:
            scenario["simulation"]["num_requests"] = run.num_requests
    else:
        raise RecordError(f"{run.source}: neither per-request records nor a workload to replay")
    if run.request_timeout_s is not None:
        scenario["workload"] = {**scenario["workload"], "request_timeout_s": run.request_timeout_s}
    return scenario, notes


def origin_of(run: RecordedRun, field: str | None) -> str | None:
    """The recorded field the replay's scenario ``field`` was made from (the most specific
    of the run's origins and the engine arguments), or None if it is not known."""
    if not field:
        return None
    table = {path: f"engine argument {name}" for name, path in SCENARIO_FIELDS.items()}
    table.update(run.origins)
    within = [p for p in table if field == p or field.startswith((f"{p}.", f"{p}["))]
    return table[max(within, key=len)] if within else None


def trace_rows(run: RecordedRun) -> list[str]:
    """The ``requests-jsonl`` lines of the recorded requests (send order)."""
    requests = run.requests
    assert requests is not None
    order = np.argsort(requests.send_s, kind="stable")
    rows = []
    for i in order.tolist():
        row: dict[str, Any] = {
            "arrival_s": round(float(requests.send_s[i]), 9),
            "input_tokens": max(1, int(requests.prompt_tokens[i])),
            "output_tokens": max(1, int(requests.output_tokens[i])),
        }
        if requests.prefix_blocks is not None:
            row["hash_ids"] = requests.prefix_blocks[i].tolist()
        rows.append(json.dumps(row))
    return rows


def write_trace(folder: Path, run: RecordedRun) -> Path:
    path = folder / TRACE_FILE
    path.write_text("\n".join(trace_rows(run)) + "\n", encoding="utf-8")
    return path
