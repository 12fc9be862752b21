"""Hardware in the loop: `backend: torch` runs a scenario on the real paged backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.cli import main

pytest.importorskip("torch")

TINY = Path(__file__).resolve().parents[3] / "scenarios" / "tiny.yaml"


def test_torch_backend_runs_a_scenario_end_to_end(tmp_path):
    out = tmp_path / "run"
    code = main(
        [
            "run",
            str(TINY),
            "--out",
            str(out),
            "--quiet",
            "--no-report",
            "--set",
            "backend.kind=torch",
            "--set",
            "simulation.num_requests=12",
        ]
    )
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_finished"] == 12
    steps = (out / "steps.csv").read_text().splitlines()
    durations = [float(line.split(",")[2]) for line in steps[1:]]
    # Measured times: positive, and not all equal (a cost model on a fixed batch would be)
    assert all(d > 0 for d in durations) and len(set(durations)) > 1


def test_torch_backend_refuses_contiguous_allocator(tmp_path, capsys):
    code = main(
        [
            "run",
            str(TINY),
            "--out",
            str(tmp_path / "r"),
            "--quiet",
            "--set",
            "backend.kind=torch",
            "--set",
            "cache.allocator=contiguous-max",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "cache.allocator" in err and len(err.strip().splitlines()) == 1
