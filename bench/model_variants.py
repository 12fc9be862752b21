"""What the model structures buy, as the README's MoE and FP8-KV tables quote them.

1. ``scenarios/moe/mixtral-8x7b-ep.yaml`` three ways: expert parallel, tensor parallel,
   and its dense twin (the same config with ``moe: null`` and ``intermediate_size:
   28672``: the same 12.9B active parameters).
2. ``scenarios/long-context.yaml`` with the same 12.6 GB of KV in bf16 (6,000 blocks) or
   fp8 (12,000), prefix caching off, 1,500 requests, at 4 and 6 req/s.
3. DeepSeek-V2-Lite's KV pool on one H100, and the busiest GPU's share of routed rows
   under expert parallelism (uniform routing) quoted beside them.

Prints the tables, CPU time and the load average. Asserts nothing.

    .venv/bin/python bench/model_variants.py
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.cli import main as pagesim  # noqa: E402
from sim.config.loader import load_scenario, validate_scenario  # noqa: E402
from sim.run.build import analytic_executor  # noqa: E402

MIXTRAL = "scenarios/moe/mixtral-8x7b-ep.yaml"
DENSE_TWIN = "model={config: ../models/mixtral-8x7b.json, max_model_len: 8192, moe: null, " + (
    "intermediate_size: 28672}"
)
LONG = "scenarios/long-context.yaml"
LONG_SETS = ["simulation.num_requests=1500", "cache.prefix_caching=false"]


def run(scenario: str, sets: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as out:
        args = ["run", str(ROOT / scenario), "--out", out, "--quiet", "--no-report"]
        for assignment in sets:
            args += ["--set", assignment]
        with contextlib.redirect_stdout(io.StringIO()):  # its "wrote ..." line
            failed = pagesim(args) != 0
        if failed:
            raise SystemExit(f"pagesim run {scenario} {sets} failed")
        return json.loads((Path(out) / "summary.json").read_text())


def row(label: str, summary: dict) -> str:
    """The run's figures as ``pagesim run`` prints them first: the steady window's, or
    the whole run's (marked *) where the run has no steady window."""
    window = summary["steady_state"]
    whole = window.get("ttft_s") is None
    source = summary if whole else window
    ttft, tpot = source["ttft_s"], source["tpot_s"]
    tokens = summary["benchmark"]["output_throughput"] if whole else window["throughput_tok_s"]
    return (
        f"{label:34} {summary['num_blocks']:>9,} {1e3 * tpot['p50']:7.1f} "
        f"{1e3 * tpot['p99']:7.1f} {1e3 * ttft['p50']:9,.0f} {summary['mean_batch_size']:6.1f} "
        f"{tokens:8,.0f}{'*' if whole else ' '} {summary['num_preemptions']:5d}  "
        f"{window['verdict']}"
    )


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # --help
    start = time.process_time()
    print(f"load average (1 min): {os.getloadavg()[0]:.2f}")
    header = (
        f"{'run':34} {'KV blocks':>9} {'TPOT50':>7} {'TPOT99':>7} {'TTFT50':>9} "
        f"{'batch':>6} {'tok/s':>9} {'preem':>5}  verdict"
    )
    print("\nthe steady window's figures (* the whole run's: no steady window); times in ms")
    print(f"\n{MIXTRAL}\n{header}")
    print(row("Mixtral-8x7B, expert parallel", run(MIXTRAL, [])))
    print(row("Mixtral-8x7B, tensor parallel", run(MIXTRAL, ["expert_parallel=false"])))
    print(row("dense twin, 12.9B", run(MIXTRAL, ["expert_parallel=false", DENSE_TWIN])))
    print(f"\n{LONG}, same 12.6 GB of KV\n{header}")
    for rate in (4, 6):
        sets = [*LONG_SETS, f"workload.arrival.rate_rps={rate}"]
        print(row(f"{rate} req/s, bf16", run(LONG, [*sets, "cache.num_blocks=6000"])))
        fp8 = [*sets, "cache.num_blocks=12000", "cache.kv_dtype=fp8"]
        print(row(f"{rate} req/s, fp8", run(LONG, fp8)))
    lite = load_scenario(ROOT / "scenarios/moe/deepseek-v2-lite.yaml")
    kv = lite.model.kv_bytes_per_token(1)
    print(
        f"\nDeepSeek-V2-Lite on one H100: {lite.kv_pool.device_blocks:,} blocks, "
        f"{kv:,} B of latent KV a token"
    )
    for tp, tokens in ((4, 16), (2, 2048)):
        raw = {
            "model": {"config": "models/qwen3-30b-a3b.json"},
            "tensor_parallel": tp,
            "expert_parallel": True,
            "simulation": {"num_requests": 1},
        }
        layer = analytic_executor(validate_scenario(raw, base_dir=ROOT / "scenarios")).moe
        load = layer.busiest_rank_load(tokens)
        print(
            f"Qwen3-30B-A3B, EP over {tp} GPUs, {tokens} tokens: busiest GPU {load:.3f}x the mean"
        )
    print(f"\nCPU {time.process_time() - start:.0f} s")


if __name__ == "__main__":
    main()
