"""GPU timings for the paged backend (run by bench/gpu_check.sh on a lent GPU).

1. Device copy bandwidth (a large device-to-device copy; read + write bytes counted), and
   the host link both ways (pinned CPU memory, 1 GiB): what a swap or an offload tier's
   load and store move over, against the hardware preset's host_link figure.
2. Paged decode attention (Triton, block size 16, blocks in random order) against a
   contiguous baseline (torch SDPA over dense KV) over batch x context at llama-3-8b head
   shapes in bfloat16: microseconds, GB/s of KV read, fraction of copy bandwidth,
   overhead versus contiguous.
3. One full llama-3-8b-shaped model step (random weights) through PagedExecutor.

Prints figures, never asserts on time; writes CSVs under --out. Usage:
    python3 bench/gpu_kernels.py --out DIR [--quick]
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.real import LLAMA3_8B, PagedExecutor, ops  # noqa: E402
from backend.step import Batch, PrefillChunk  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM, BLOCK_SIZE = 32, 8, 128, 16
BATCHES = [1, 4, 16, 64, 256]
CONTEXTS = [512, 2048, 8192, 32768]


def cuda_time_us(fn, *, warmup: int = 3, reps: int = 10) -> float:
    """Median microseconds of ``fn`` by CUDA events (perf_counter without CUDA, for the
    CPU smoke run only)."""
    for _ in range(warmup):
        fn()
    times = []
    if not torch.cuda.is_available():
        for _ in range(reps):
            began = time.perf_counter()
            fn()
            times.append((time.perf_counter() - began) * 1e6)
        return float(np.median(times))
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return float(np.median(times))


def copy_bandwidth_gbs(num_bytes: int = 4 << 30) -> float:
    src = torch.empty(num_bytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = cuda_time_us(lambda: dst.copy_(src), reps=5)
    return 2 * num_bytes / us / 1e3


def host_link_gbs(num_bytes: int = 1 << 30) -> dict[str, float]:
    """GB/s of one copy between pinned CPU memory and the GPU, each way (bytes moved once)."""
    host = torch.empty(num_bytes, dtype=torch.uint8, pin_memory=True)
    device = torch.empty(num_bytes, dtype=torch.uint8, device="cuda")
    to_gpu = cuda_time_us(lambda: device.copy_(host, non_blocking=True), reps=5)
    to_cpu = cuda_time_us(lambda: host.copy_(device, non_blocking=True), reps=5)
    return {"cpu_to_gpu": num_bytes / to_gpu / 1e3, "gpu_to_cpu": num_bytes / to_cpu / 1e3}


def decode_grid(copy_gbs: float, batches, contexts, device="cuda") -> list[dict]:
    gen = torch.Generator(device=device).manual_seed(0)
    max_tokens = max(batches) * max(contexts)
    num_blocks = max_tokens // BLOCK_SIZE
    dims = (num_blocks, BLOCK_SIZE, KV_HEADS, HEAD_DIM)
    key_cache = torch.randn(dims, generator=gen, device=device, dtype=torch.bfloat16)
    value_cache = torch.randn(dims, generator=gen, device=device, dtype=torch.bfloat16)
    scale = 1.0 / math.sqrt(HEAD_DIM)
    rows = []
    for batch in batches:
        for context in contexts:
            tokens = batch * context
            per_seq = context // BLOCK_SIZE
            # Paged: each sequence's blocks scattered over the whole pool, random order.
            order = torch.randperm(num_blocks, generator=gen, device=device)[: batch * per_seq]
            tables = order.view(batch, per_seq).to(torch.int32)
            lens = torch.full((batch,), context, dtype=torch.int32, device=device)
            query = torch.randn(batch, HEADS, HEAD_DIM, device=device, dtype=torch.bfloat16)
            splits = ops.choose_num_splits(batch * KV_HEADS, context, query.device)

            def paged(query=query, tables=tables, lens=lens):
                ops.paged_decode_attention(
                    query, key_cache, value_cache, tables, lens, scale, use_triton=True
                )

            # Contiguous: the first tokens of the same memory as dense [B, ctx, Hkv, D].
            dense_k = key_cache.view(-1, KV_HEADS, HEAD_DIM)[:tokens].view(
                batch, context, KV_HEADS, HEAD_DIM
            )
            dense_v = value_cache.view(-1, KV_HEADS, HEAD_DIM)[:tokens].view(
                batch, context, KV_HEADS, HEAD_DIM
            )
            # Decode GQA as plain attention: a KV head's group of query heads become its
            # "query tokens" (no mask: a decode token sees its whole context). Standard SDPA
            # then picks its fastest dense kernel, with no K/V repeated per query head.
            grouped = query.view(batch, KV_HEADS, HEADS // KV_HEADS, HEAD_DIM)

            def contiguous(grouped=grouped, dense_k=dense_k, dense_v=dense_v):
                torch.nn.functional.scaled_dot_product_attention(
                    grouped, dense_k.transpose(1, 2), dense_v.transpose(1, 2)
                )

            try:
                paged_us = cuda_time_us(paged)
                contiguous_us = cuda_time_us(contiguous)
            except torch.cuda.OutOfMemoryError:  # keep the rest of the grid
                print(f"batch {batch} context {context}: out of memory, skipped", flush=True)
                continue
            kv_bytes = tokens * KV_HEADS * HEAD_DIM * 2 * 2
            gbs = kv_bytes / paged_us / 1e3
            rows.append(
                dict(
                    batch=batch,
                    context=context,
                    splits=splits,
                    paged_us=round(paged_us, 1),
                    contiguous_us=round(contiguous_us, 1),
                    paged_gbs=round(gbs, 1),
                    contiguous_gbs=round(kv_bytes / contiguous_us / 1e3, 1),
                    frac_of_copy_bw=round(gbs / copy_gbs, 3),
                    overhead_vs_contiguous=round(paged_us / contiguous_us - 1, 3),
                )
            )
            print(rows[-1], flush=True)
    return rows


class _TablesOnly:
    """The executor only reads block tables and the pool geometry from its allocator."""

    def __init__(self, num_blocks: int, tables: dict[int, list[int]]):
        self.num_blocks, self.block_size = num_blocks, BLOCK_SIZE
        self.num_cpu_blocks = 0
        self.tables = tables

    def block_table(self, seq_id: int) -> list[int]:
        return self.tables[seq_id]


def model_step(
    num_decodes: int,
    context: int,
    prefill_tokens: int,
    *,
    shape=LLAMA3_8B,
    device="cuda",
    dtype=torch.bfloat16,
) -> dict:
    """One model step (llama-3-8b-shaped by default): ``num_decodes`` decodes at ``context``
    tokens plus one prefill chunk of ``prefill_tokens``, random weights."""
    per_seq = -(-context // BLOCK_SIZE)
    chunk_blocks = -(-prefill_tokens // BLOCK_SIZE)
    num_blocks = num_decodes * per_seq + chunk_blocks + 16
    order = np.random.default_rng(0).permutation(num_blocks).tolist()
    tables = {s: order[s * per_seq : (s + 1) * per_seq] for s in range(num_decodes)}
    tables[num_decodes] = order[num_decodes * per_seq : num_decodes * per_seq + chunk_blocks]
    began = time.perf_counter()
    executor = PagedExecutor(shape, _TablesOnly(num_blocks, tables), device=device, dtype=dtype)
    setup_s = time.perf_counter() - began
    rng = np.random.default_rng(1)
    prompt = rng.integers(0, shape.vocab_size, prefill_tokens, dtype=np.int32)
    batch = Batch(
        prefills=(PrefillChunk(num_decodes, 0, prompt),),
        decode_seq_ids=np.arange(num_decodes, dtype=np.int64),
        decode_context_lens=np.full(num_decodes, context, dtype=np.int64),
        decode_token_ids=rng.integers(0, shape.vocab_size, num_decodes, dtype=np.int32),
    )
    seconds = [executor.execute(batch) for _ in range(4)][1:]  # the first compiles kernels
    decode_only = batch._replace(prefills=())
    decode_s = [executor.execute(decode_only) for _ in range(3)]
    return dict(
        num_decodes=num_decodes,
        context=context,
        prefill_tokens=prefill_tokens,
        step_ms=round(1e3 * float(np.median(seconds)), 2),
        decode_only_step_ms=round(1e3 * float(np.median(decode_s)), 2),
        setup_s=round(setup_s, 1),
    )


def write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--quick", action="store_true", help="a small grid (smoke run)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        sys.exit("gpu_kernels.py needs a CUDA device (none found); nothing timed")
    device = torch.cuda.get_device_name()
    print(f"device: {device}; torch {torch.__version__}", flush=True)
    copy_gbs = copy_bandwidth_gbs()
    print(f"device copy bandwidth: {copy_gbs:.0f} GB/s", flush=True)
    link = host_link_gbs()
    print(
        f"host link (pinned, 1 GiB): CPU->GPU {link['cpu_to_gpu']:.1f} GB/s, "
        f"GPU->CPU {link['gpu_to_cpu']:.1f} GB/s",
        flush=True,
    )
    write_csv(args.out / "gpu_host_link.csv", [{k: round(v, 2) for k, v in link.items()}])
    batches, contexts = (BATCHES[:2], CONTEXTS[:2]) if args.quick else (BATCHES, CONTEXTS)
    rows = decode_grid(copy_gbs, batches, contexts)
    write_csv(args.out / "gpu_decode_attention.csv", rows)
    torch.cuda.empty_cache()  # the grid's pool is gone; give its memory to the model step
    step = model_step(num_decodes=32, context=2048, prefill_tokens=512)
    write_csv(args.out / "gpu_model_step.csv", [step])

    print(f"\n== paged decode attention, llama-3-8b heads, bf16, {device} ==")
    print(f"copy bandwidth {copy_gbs:.0f} GB/s")
    header = f"{'batch':>5} {'ctx':>6} {'split':>5} {'paged us':>9} {'dense us':>9}"
    print(header + f" {'GB/s':>7} {'of copy':>7} {'overhead':>8}")
    for r in rows:
        print(
            f"{r['batch']:>5} {r['context']:>6} {r['splits']:>5} {r['paged_us']:>9.1f} "
            f"{r['contiguous_us']:>9.1f} {r['paged_gbs']:>7.0f} "
            f"{r['frac_of_copy_bw']:>7.0%} {r['overhead_vs_contiguous']:>+8.0%}"
        )
    print(f"llama-3-8b step (random weights, bf16): {step}")


if __name__ == "__main__":
    main()
