"""Prefix hits and TTFT across KV cache tiers on Mooncake's published conversation trace
(scenarios/traces/mooncake-conversation.jsonl, FAST'25 release, Apache-2.0), each tier
beside the offline optimum (Belady) for that tier.

    .venv/bin/python bench/offload_tiers.py                      # first 3,000 requests
    .venv/bin/python bench/offload_tiers.py --requests 12031 --capacities 16 64 256 1024
    .venv/bin/python bench/offload_tiers.py --disks 2048 8192     # disk tiers under the CPU's

Rows: the device's prefix cache alone (LRU, and Belady on the device), then a CPU tier
of each capacity (GiB for the replica, vLLM's --kv-offloading-size) under LRU and under
Belady, then the smallest CPU tier (LRU) with a disk tier of each --disks capacity below
it, the disk under LRU and under Belady. Columns: the prompt-token hit rate (device and
tier hits), TTFT p50/p90, the prompt tokens the CPU and the disk tier served, and the GiB
loaded onto the device from either. The last line is the trace's own bound: the share of
prompt tokens in 512-token blocks that an earlier request of the same run already held
(an unbounded cache that never forgets). Runs in parallel processes; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.config.loader import load_scenario  # noqa: E402
from sim.run.progress import map_with_progress  # noqa: E402
from sim.run.runner import simulate  # noqa: E402

SCENARIO = ROOT / "scenarios" / "trace-mooncake.yaml"
TRACE = ROOT / "scenarios" / "traces" / "mooncake-conversation.jsonl"
GIB = 1 << 30


def run(label: str, overrides: list[str]) -> tuple[str, dict, float]:
    began = time.process_time()
    summary = simulate(load_scenario(SCENARIO, overrides=overrides)).summary
    return label, summary, time.process_time() - began


def cases(
    requests: int, capacities: list[float], disks: list[float]
) -> list[tuple[str, list[str]]]:
    base = [  # llama-3.1-8b: a 128k context holds the trace's longest prompts whole
        "model={config: models/llama-3.1-8b.json}",
        "workload.arrival.path=traces/mooncake-conversation.jsonl",
        # A quarter of the trace's rate: one H100 keeps up (TTFT p50 about 2 s on its
        # 12k-token prompts) instead of queueing without end at the full hour's rate.
        "workload.arrival.time_scale=4",
        f"simulation.num_requests={requests}",
        "simulation.warmup_requests=0",  # the hit rate over every request, as the bound
    ]
    rows = [
        ("device, lru", [*base, "eviction.policy=lru"]),
        ("device, belady", [*base, "eviction.policy=belady"]),
    ]
    for gib in capacities:
        for policy in ("lru", "belady"):
            tier = f"cache.offload=[{{tier: cpu, capacity_gib: {gib}, eviction: {policy}}}]"
            rows.append((f"+ cpu {gib:g} GiB, {policy}", [*base, tier]))
    cpu = min(capacities)
    for gib in disks:
        for policy in ("lru", "belady"):
            tiers = (
                f"cache.offload=[{{tier: cpu, capacity_gib: {cpu}}}, "
                f"{{tier: disk, capacity_gib: {gib}, eviction: {policy}}}]"
            )
            rows.append((f"+ disk {gib:g} GiB, {policy}", [*base, tiers]))
    return rows


def trace_bound(requests: int) -> float:
    """Prompt tokens in leading 512-token blocks an earlier request held, over all."""
    seen: set[tuple[int, ...]] = set()
    hit = total = 0
    with TRACE.open() as rows:
        for _, line in zip(range(requests), rows, strict=False):
            row = json.loads(line)
            ids, length = row["hash_ids"], row["input_length"]
            usable = min(len(ids), (length - 1) // 512)
            prefix: tuple[int, ...] = ()
            run_on = True
            for index, block in enumerate(ids):
                prefix = (*prefix, block)
                if run_on and index < usable and prefix in seen:
                    hit += 512
                else:
                    run_on = False
                seen.add(prefix)
            total += length
    return hit / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--capacities", type=float, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--disks", type=float, nargs="*", default=[2048, 8192])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    rows = cases(args.requests, args.capacities, args.disks)
    began = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        results = map_with_progress(pool, run, *zip(*rows, strict=True), label="cases", unit="run")
    print(
        f"Mooncake conversation trace, first {args.requests} requests; llama-3.1-8b, one "
        "H100 at a quarter of the trace's rate, vllm-v1"
    )
    print(f"(disk rows: the CPU tier of {min(args.capacities):g} GiB, LRU, above the disk)")
    print(
        f"{'cache':<26}{'hit rate':>9}{'TTFT p50 s':>12}{'TTFT p90 s':>12}"
        f"{'cpu hit tok':>13}{'disk hit tok':>14}{'loaded GiB':>12}{'CPU s':>8}"
    )
    for label, summary, cpu_s in results:
        tiers = {t["tier"]: t for t in (summary.get("kv_offload") or {}).get("tiers", [])}
        served = [tiers.get(name, {}).get("hit_tokens", 0) for name in ("cpu", "disk")]
        loaded = sum(t["loaded_bytes"] for t in tiers.values()) / GIB
        ttft = summary["ttft_s"]
        print(
            f"{label:<26}{summary['prefix_hit_rate']:>9.1%}{ttft['p50']:>12.3f}"
            f"{ttft['p90']:>12.3f}{served[0]:>13,}{served[1]:>14,}"
            f"{loaded:>12.1f}{cpu_s:>8.1f}"
        )
    print(f"{'trace bound (no eviction)':<26}{trace_bound(args.requests):>9.1%}")
    load = os.getloadavg()[0]
    print(f"wall {time.perf_counter() - began:.0f} s, {args.jobs} processes, load {load:.1f}")


if __name__ == "__main__":
    main()
