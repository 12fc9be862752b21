"""How far is the analytic cost model from NVIDIA's per-kernel measurements of vLLM?

    .venv/bin/python bench/costmodel_vs_aiconfigurator.py DIR [--vllm 0.14.0]

DIR is one GPU's folder of measured tables in ai-dynamo/aiconfigurator (Apache-2.0):
``aic-core/src/aiconfigurator_core/systems/data/h100_sxm`` (read here at commit 095f58a,
2026-08-21). NVIDIA measured each kernel as vLLM runs it, on an H100 80GB HBM3:

* ``attention/vllm/<v>/generation_attention_perf.parquet``: decode attention
  (``vllm_flash_attn``) of ``batch_size`` sequences of ``1 + step`` cached tokens,
  ``num_heads`` query and ``num_key_value_heads`` KV heads of 128, bf16 KV;
* ``gemm/vllm/<v>/gemm_perf.parquet``: bf16 ``(m x k) @ (k x n)`` GEMMs;
* ``comm/vllm/<v>/custom_allreduce_perf.parquet``: vLLM's custom all-reduce inside a
  CUDA graph of ``message_size`` bf16 elements over ``num_gpus`` GPUs.

It compares pagesim's ``GpuKernels`` (h100-sxm preset, default CostParams) at every
measured point of the decode regime (attention: batch >= 8 and >= 512 tokens; GEMMs:
m <= 256; all-reduce: up to 4M elements), then adds up one decoder layer of the
overloaded corpus runs (128 sequences of ~1,800 tokens: CodeLlama-34B at TP 2,
Llama-2-70B at TP 4) kernel by kernel, measured and modelled. Nothing of this data set
set a constant of pagesim. Needs pyarrow to read the tables (not a pagesim dependency:
``.venv/bin/pip install pyarrow``). Nothing here asserts: it prints figures.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.catalog.cost_params import CostParams  # noqa: E402
from sim.catalog.presets import HARDWARE_PRESETS  # noqa: E402
from sim.costs.kernels import GpuKernels  # noqa: E402

HEAD_DIM = 128
#: (label, query heads, KV heads, hidden, intermediate, tp) of the overloaded corpus runs
LAYERS = (
    ("CodeLlama-34B TP 2", 64, 8, 8192, 22016, 2),
    ("Llama-2-70B TP 4", 64, 8, 8192, 28672, 4),
)
BATCH, CONTEXT = 128, 1792  # ~1,800-token contexts; a measured step (1 + 1791)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="aiconfigurator's systems/data/h100_sxm")
    parser.add_argument("--vllm", default="0.14.0", help="the vLLM version's tables")
    args = parser.parse_args()
    try:
        import pyarrow.parquet as pq
    except ImportError:
        print("needs pyarrow to read the tables: .venv/bin/pip install pyarrow", file=sys.stderr)
        return 2

    def table(kind: str, name: str) -> list[dict]:
        path = args.data / kind / "vllm" / args.vllm / f"{name}.parquet"
        if not path.is_file():
            print(
                f"{path}: not found (DIR is systems/data/<gpu> of aiconfigurator)", file=sys.stderr
            )
            raise SystemExit(2)
        return pq.read_table(path).to_pylist()

    kernels = GpuKernels(HARDWARE_PRESETS["h100-sxm"], CostParams(), 2)
    attention = {
        (r["batch_size"], 1 + r["step"], r["num_heads"], r["num_key_value_heads"]): r["latency"]
        for r in table("attention", "generation_attention_perf")
        if r["kv_cache_dtype"] == "bfloat16" and r["head_dim"] == HEAD_DIM
    }
    gemms = {
        (r["m"], r["n"], r["k"]): r["latency"]
        for r in table("gemm", "gemm_perf")
        if r["gemm_dtype"] == "bfloat16"
    }
    allreduce = {
        (r["num_gpus"], r["message_size"]): r["latency"]
        for r in table("comm", "custom_allreduce_perf")
        if r["backend"] == "vllm_graph"
    }
    print(f"pagesim's kernels against aiconfigurator's vLLM {args.vllm} tables (H100 SXM)")
    print("ratio = modelled / measured time; median and [10th, 90th percentile] over the points")
    _regimes(kernels, attention, gemms, allreduce)
    _layers(kernels, attention, gemms, allreduce)
    print(f"reproduce: .venv/bin/python bench/costmodel_vs_aiconfigurator.py {args.data}")
    return 0


def _decode_attention_s(kernels, batch, context, kv_heads) -> float:
    kv_bytes = 2 * kv_heads * HEAD_DIM * 2  # K and V of one layer, bf16
    return kernels.decode_attention(batch, batch * context, kv_bytes)


def _regimes(kernels, attention, gemms, allreduce) -> None:
    rows = []
    for label, points in (
        ("decode attention, batch 8-31", [k for k in attention if 8 <= k[0] < 32]),
        ("decode attention, batch 32-127", [k for k in attention if 32 <= k[0] < 128]),
        ("decode attention, batch >= 128", [k for k in attention if k[0] >= 128]),
    ):
        points = [k for k in points if k[1] >= 512]
        ratios = [
            _decode_attention_s(kernels, b, c, kv) * 1e3 / attention[(b, c, h, kv)]
            for b, c, h, kv in points
        ]
        rows.append((label, ratios))
    for low, high in ((1, 32), (33, 128), (129, 256)):
        points = [k for k in gemms if low <= k[0] <= high and min(k[1], k[2]) >= 1024]
        ratios = [kernels.gemm(m, k, n) * 1e3 / gemms[(m, n, k)] for m, n, k in points]
        rows.append((f"GEMM, m {low}-{high}, n and k >= 1024", ratios))
    for gpus in sorted({g for g, _ in allreduce}):
        points = [s for g, s in allreduce if g == gpus and 2**17 <= s <= 2**22]
        ratios = [kernels.allreduce(2 * s, gpus) * 1e3 / allreduce[(gpus, s)] for s in points]
        rows.append((f"all-reduce, {gpus} GPUs, 128K-4M elements", ratios))
    print(f"\n{'regime':44} {'points':>6} {'median':>7}  {'p10':>5} {'p90':>5}")
    for label, ratios in rows:
        if not ratios:
            continue
        deciles = statistics.quantiles(ratios, n=10) if len(ratios) > 1 else ratios * 9
        print(
            f"{label:44} {len(ratios):>6} {statistics.median(ratios):>7.2f}"
            f"  {deciles[0]:>5.2f} {deciles[-1]:>5.2f}"
        )


def _nearest(table: dict, key: tuple) -> tuple:
    """The measured key nearest ``key`` (log distance over every field)."""
    return min(table, key=lambda k: sum(abs(math.log(a / b)) for a, b in zip(k, key)))


def _layers(kernels, attention, gemms, allreduce) -> None:
    print(
        f"\none decoder layer of {BATCH} decodes of {CONTEXT} tokens (nearest measured "
        "shape), microseconds: measured / modelled"
    )
    for label, heads, kv_heads, hidden, inter, tp in LAYERS:
        q, kv, mlp = heads // tp, kv_heads // tp, inter // tp
        shapes = {  # name -> (m, n, k)
            "qkv_proj": (BATCH, (q + 2 * kv) * HEAD_DIM, hidden),
            "o_proj": (BATCH, hidden, q * HEAD_DIM),
            "gate_up_proj": (BATCH, 2 * mlp, hidden),
            "down_proj": (BATCH, hidden, mlp),
        }
        parts = []
        for name, (m, n, k) in shapes.items():
            near = _nearest(gemms, (m, n, k))
            parts.append(
                (
                    f"{name} {near[1]}x{near[2]}",
                    gemms[near] * 1e3,
                    kernels.gemm(near[0], near[2], near[1]) * 1e6,
                )
            )
        near = _nearest(attention, (BATCH, CONTEXT, q, kv))
        parts.append(
            (
                f"attention {near[2]}/{near[3]} heads",
                attention[near] * 1e3,
                _decode_attention_s(kernels, near[0], near[1], near[3]) * 1e6,
            )
        )
        near = _nearest(allreduce, (tp, BATCH * hidden))
        parts.append(
            (
                f"2 all-reduces of {near[1]:,} elements",
                2 * allreduce[near] * 1e3,
                2 * kernels.allreduce(2 * near[1], tp) * 1e6,
            )
        )
        measured, modelled = sum(p[1] for p in parts), sum(p[2] for p in parts)
        print(f"  {label}: {measured:.0f} / {modelled:.0f} ({modelled / measured - 1:+.1%})")
        for name, meas, model in parts:
            print(f"    {name:34} {meas:7.1f} / {model:7.1f} ({model / meas - 1:+.1%})")


if __name__ == "__main__":
    sys.exit(main())
