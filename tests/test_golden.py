"""Same scenario and seed, same bytes: every shipped scenario (and a few variants) must
write exactly the requests.csv, steps.csv and summary.json that the code wrote when
tests/golden/outputs.json was last regenerated. A refactoring must leave them alone; a
change that means to alter outputs regenerates them (tests/golden/cases.py says how)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.golden.cases import cases, digests, scenario_dump_digests

PINNED = json.loads((Path(__file__).parent / "golden" / "outputs.json").read_text())
PINNED_DUMPS = json.loads((Path(__file__).parent / "golden" / "scenario_json.json").read_text())


def test_every_case_is_pinned():
    assert sorted(PINNED) == sorted(cases())


@pytest.mark.parametrize("name", sorted(cases()))
def test_outputs_are_byte_identical_to_the_pinned_ones(name):
    scenario, overrides = cases()[name]
    assert digests(scenario, overrides) == PINNED[name]


def test_scenario_dumps_are_byte_identical_to_the_pinned_ones():
    """scenario.json of every shipped scenario: what the schema's documentation (field
    descriptions, the JSON schema) adds must never reach a dump."""
    found = scenario_dump_digests()
    assert sorted(found) == sorted(PINNED_DUMPS)
    changed = [path for path in found if found[path] != PINNED_DUMPS[path]]
    assert not changed, f"scenario.json changed for {changed}"


def test_outputs_do_not_depend_on_the_string_hash_seed(tmp_path):
    """Two processes with different PYTHONHASHSEED write the same bytes (a set iterated
    in a float sum once made a step's duration differ in its last bit)."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    outputs = []
    for seed in ("0", "1"):  # seeds under which the old set's order changed a step's sum
        out = tmp_path / seed
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run(
            [
                sys.executable,
                "-m",
                "sim.cli",
                "run",
                "scenarios/tiny.yaml",
                "--out",
                str(out),
                "--quiet",
                "--no-report",
                "--set",
                "simulation.num_requests=300",
                "--set",
                "simulation.warmup_requests=20",
            ],
            cwd=root,
            env=env,
            check=True,
        )
        outputs.append({name: (out / name).read_bytes() for name in ("steps.csv", "summary.json")})
    assert outputs[0] == outputs[1]


def test_summary_does_not_depend_on_blas_threads(tmp_path):
    """summary.json is the same whatever number of threads numpy's BLAS runs (its dot
    products once summed in a thread-dependent order: the KV split's last digits moved)."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    summaries = []
    for threads in ("1", "2"):
        out = tmp_path / threads
        env = {**os.environ, "OPENBLAS_NUM_THREADS": threads, "OMP_NUM_THREADS": threads}
        command = [sys.executable, "-m", "sim.cli", "run", "scenarios/tiny.yaml", "--out"]
        command += [str(out), "--quiet", "--no-report", "--set", "simulation.num_requests=3000"]
        subprocess.run(command, cwd=root, env=env, check=True)
        summaries.append((out / "summary.json").read_bytes())
    assert summaries[0] == summaries[1]
