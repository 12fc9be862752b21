"""The MoE layer of the analytic model against published fused-MoE kernel timings.

``validation/moe-kernels/fused_moe.csv`` holds timings of vLLM's fused MoE (Triton)
as its own ``benchmarks/kernels/benchmark_moe.py`` prints them, quoted in public pull
requests (each row names its source): ``fused_topk`` plus ``fused_experts`` on random
gating logits (so routing is close to uniform), 10 invocations in one CUDA graph, mean
per invocation. The model's counterpart is the sum of ``moe_topk``, ``moe_align``,
``moe_gate_up``, ``moe_act``, ``moe_down`` and ``moe_sum`` (sim/costs/moe.py) for the
same model, GPU preset, tensor-parallel size and element size.

Rows marked ``tune`` (Mixtral-8x7B, bf16, H100, TP 2: vllm#24700) chose
``MOE_MEMORY_EFFICIENCY`` and ``MOE_GEMM_EFFICIENCY``; the ``check`` rows (other
models, GPUs and element sizes) were not looked at while choosing them. Prints one
line per row and the MAPE per table. Asserts nothing.

    .venv/bin/python bench/moe_vs_measurements.py
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.config.loader import validate_scenario  # noqa: E402
from sim.run.build import analytic_executor  # noqa: E402

TIMED = ("moe_topk", "moe_align", "moe_gate_up", "moe_act", "moe_down", "moe_sum")


def layer(model: str, gpu: str, tp: int, dtype_bytes: int, **params):
    raw = {
        "model": {"config": f"models/{model}.json", "dtype_bytes": dtype_bytes},
        # One layer's kernels are timed: the card's memory does not enter, and the whole
        # model need not fit it (Qwen3-30B-A3B's 61 GB on an A100-40GB at TP 1).
        "hardware": {"preset": gpu, "mem_capacity_bytes": 1 << 50},
        "tensor_parallel": tp,
        "simulation": {"num_requests": 1},
        "cache": {"num_blocks": 16},
        "cost_model": {"params": params} if params else {},
    }
    return analytic_executor(validate_scenario(raw, base_dir=ROOT / "scenarios")).moe


def predicted_us(moe, tokens: int) -> float:
    ops = moe.ops(tokens)
    return 1e6 * sum(ops[name] for name in TIMED)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # --help
    rows = list(csv.DictReader((ROOT / "validation/moe-kernels/fused_moe.csv").open()))
    tables: dict[tuple, list[dict]] = {}
    for row in rows:
        key = (row["role"], row["model"], row["gpu"], int(row["tensor_parallel"]))
        tables.setdefault(key + (int(row["dtype_bytes"]),), []).append(row)
    print(f"{'role':5} {'model':16} {'gpu':10} tp B {'tokens':>6} {'measured':>9} {'model':>9} err")
    for (role, model, gpu, tp, dtype_bytes), table in tables.items():
        moe = layer(model, gpu, tp, dtype_bytes)
        errors = []
        for row in table:
            tokens, measured = int(row["tokens"]), float(row["time_us"])
            ours = predicted_us(moe, tokens)
            errors.append(abs(ours - measured) / measured)
            print(
                f"{role:5} {model:16} {gpu:10} {tp:2} {dtype_bytes} {tokens:6d} "
                f"{measured:9.1f} {ours:9.1f} {ours / measured - 1:+.0%}"
            )
        mape = statistics.mean(errors)
        print(
            f"  -> {model} on {gpu} TP{tp}, {8 * dtype_bytes}-bit: MAPE {mape:.1%}, "
            f"median {statistics.median(errors):.1%} over {len(errors)} sizes ({role})\n"
        )


if __name__ == "__main__":
    main()
