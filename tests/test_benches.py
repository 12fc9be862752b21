"""The measuring scripts in bench/ still run against the code they measure.

bench/step_cost.py wraps engine, allocator and cost-model functions by their dotted
names; a refactor that moves one must fail here, not the next time someone measures.
Nothing here asserts on time: only on the accounting's own arithmetic.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GROUPS = ("plan", "allocator", "cost model", "apply", "record", "SimPy + loop remainder")
#: Functions every default run calls on its hot path. The table drops labels never called,
#: so an engine that stops calling one (a new entry beside it, the old one left behind)
#: would lose that line, its time silently moving to the caller.
CALLED = (
    "StepPlanner.plan",
    "BlockManager.append_batch_trusted",
    "BlockManager.allocate_trusted",
    "BlockManager.free",
    "AnalyticCostModel.execute",
    "Completion.apply_decodes",
    "StepLog.record",
)


def run_step_cost(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(ROOT / "bench" / "step_cost.py"), *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)


def test_step_cost_accounts_for_the_whole_run():
    out = run_step_cost("--cases", "default-10k", "--requests", "1000")
    assert out.returncode == 0, out.stderr  # every target resolved (a moved one: KeyError)
    for group in GROUPS:
        assert f"[{group}]" in out.stdout
    labels = {line.split()[0] for line in out.stdout.splitlines() if line.startswith("  ")}
    assert set(CALLED) <= labels, set(CALLED) - labels
    # Labels and remainder rebuild the clock around simulate unless a label's group is
    # missing from the table (it would be measured and not printed).
    check = re.search(r"check: .* = ([\d.]+) s; the clock around simulate: ([\d.]+) s", out.stdout)
    assert check, out.stdout
    rebuilt, measured = map(float, check.groups())
    assert abs(rebuilt - measured) <= 0.002 + 0.01 * measured


def test_step_cost_says_why_a_run_failed():
    # 300 requests is below the default scenario's warm-up: the child's error is the line.
    out = run_step_cost("--cases", "default-10k", "--requests", "300")
    assert out.returncode == 1
    assert "warmup_requests" in out.stderr and "Traceback" not in out.stderr


def test_the_moe_kernel_bench_runs_and_its_fitted_table_stays_fitted():
    """bench/moe_vs_measurements.py reads every published table; the one the MoE
    constants were fitted to (README: 3.0 %) must stay within 5 %."""
    command = [sys.executable, str(ROOT / "bench" / "moe_vs_measurements.py")]
    out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    tables = re.findall(
        r"-> (\S+) on (\S+) TP(\d+), \d+-bit: MAPE ([\d.]+)%.*\((\w+)\)", out.stdout
    )
    assert len(tables) == 4
    fitted = [float(mape) for *_, mape, role in tables if role == "tune"]
    assert fitted and fitted[0] < 5.0


def test_the_offload_tier_bench_prints_every_row_on_a_short_prefix_of_the_trace():
    command = [
        sys.executable,
        str(ROOT / "bench" / "offload_tiers.py"),
        "--requests",
        "60",
        "--capacities",
        "256",
        "--disks",
        "1024",
        "--jobs",
        "1",
    ]
    out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr
    rows = {line[:26].strip(): line[26:].split() for line in out.stdout.splitlines()}
    labels = (
        "device, lru",
        "device, belady",
        "+ cpu 256 GiB, lru",
        "+ cpu 256 GiB, belady",
        "+ disk 1024 GiB, lru",
        "+ disk 1024 GiB, belady",
    )
    for label in labels:
        hit_rate = float(rows[label][0].rstrip("%"))
        assert 0 <= hit_rate <= 100
    bound = float(rows["trace bound (no eviction)"][0].rstrip("%"))
    assert float(rows["device, lru"][0].rstrip("%")) <= bound + 0.5  # (16-token blocks)


def test_the_gpu_model_step_builds_its_executor_from_what_the_bench_hands_it():
    """bench/gpu_kernels.py runs only on a lent GPU; its model step hands the executor a
    stand-in allocator, which must keep up with what the executor reads (a missing
    attribute once cost a GPU run its step figure). Here on the CPU, a tiny shape."""
    import torch

    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import gpu_kernels
    finally:
        sys.path.remove(str(ROOT / "bench"))
    from tests.backend.real.harness import TINY

    step = gpu_kernels.model_step(
        num_decodes=2,
        context=32,
        prefill_tokens=16,
        shape=TINY,
        device="cpu",
        dtype=torch.float32,
    )
    assert step["num_decodes"] == 2 and step["step_ms"] > 0 and step["decode_only_step_ms"] > 0


SCRIPTS = sorted(
    path.relative_to(ROOT).as_posix()
    for path in (ROOT / "bench").rglob("*.py")
    if 'if __name__ == "__main__"' in path.read_text(encoding="utf-8")
)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_bench_script_answers_help_without_running(script):
    """``--help`` prints the usage and exits: it never starts the measurement."""
    out = subprocess.run(
        [sys.executable, script, "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: "), out.stdout[:200]
