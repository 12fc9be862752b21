"""pagesim's block manager against vLLM's own BlockPool, in one process, interleaved.

The pattern (that of ``bench/allocator.py``): 1,000 sequences, each a 1-token prompt,
grow one token per decode step to 512 tokens at block size 16, then are freed; prefix
caching off, then on (distinct tokens: no hits, so with caching on this is the cost of
hashing and publishing every full block). Figures are CPU time (``time.process_time``)
per token step = the whole pattern (allocate, 511 decode steps, free) / (1,000 x 512),
the median of ``--runs`` runs; the runs of every variant are interleaved, so a load
change on the machine hits them all alike. The 1-minute load average is printed beside.

    .venv/bin/python bench/vs_vllm_block_pool.py --vllm-src /path/to/vllm-source
    .venv/bin/python bench/vs_vllm_block_pool.py          # pagesim alone (says so)

``--vllm-src`` is a vLLM source tree (the folder holding the ``vllm`` package: a git
checkout, ``git --git-dir=... archive`` extracted, or an unpacked sdist). Nothing of vLLM
is installed or committed: ``vllm/v1/core/block_pool.py`` and
``vllm/v1/core/kv_cache_utils.py`` (with ``vllm/utils/hashing.py`` for the block hash
and ``vllm/utils/math_utils.py`` for ``cdiv``) are executed from that tree as they are.
What they import that has nothing to do with the block pool is stubbed (see
``bench/vllm_stubs.py``: logging, KV events, metrics, config and model-spec types,
multimodal helpers, the Request class) because the real modules pull in torch, the
config system and the engine. Measured with vLLM 0.33.0's source.

What each side runs (read ``vllm/v1/core/single_type_kv_cache_manager.py`` and
``kv_cache_manager.py`` for what vLLM's scheduler makes its ``SingleTypeKVCacheManager``
do for a running, decoding request):

* vLLM manager decode step: per request per decode step,
  ``request.append_output_token_ids(token)`` (the sampled token joins the request; with
  caching on the request's block hasher, ``get_request_block_hasher`` with sha256,
  vLLM's default, hashes a block that just filled); then ``allocate_slots`` for one new
  token reduced to what the single-type manager does for a running request:
  ``get_num_blocks_to_allocate`` (its running-request fast path, ``cdiv(num_tokens,
  block_size) - len(req_blocks)``) against ``block_pool.get_num_free_blocks()``,
  ``allocate_new_blocks`` (``block_pool.get_new_blocks`` when the request crosses a
  block boundary), and with caching on ``cache_blocks`` (``block_pool.cache_full_blocks``
  once a block is full and hashed), over ``req_to_blocks`` and ``num_cached_block`` dicts
  keyed by request id as the manager keeps them. A request starts with
  ``get_new_blocks(1)`` for its prompt and ends with ``free`` (``free_blocks`` over its
  blocks, reversed). Inlined in one loop, and not included, so this is a lower bound of
  vLLM's real cost: the ``KVCacheManager.allocate_slots`` wrapper (argument handling,
  watermark, ``remove_skipped_blocks``, the coordinator's loop over KV cache groups,
  ``create_kv_cache_blocks``), the manager's own method calls (and its general path,
  which it takes for a request without a ``num_cached_block`` entry), the scheduler's
  per-request work, and the real Request class (``all_token_ids`` is a plain list here;
  vLLM's ``ConstantList`` is slower to slice).
* vLLM BlockPool calls only: the same pool calls (``get_new_blocks(1)`` for each request
  at each crossing, with caching the block's tokens appended to its request at once,
  hashed by the request's hasher and ``cache_full_blocks``, and ``free_blocks``), but
  the driver knows from the lock-step pattern when they are due, so nothing runs for a
  request in the other steps: the pool's own cost, the lowest vLLM can go. This is the
  reference of the issue's figures, and the strictest one.
* pagesim ``append_batch_trusted``: one call per decode step for the whole batch (the
  engine's path, ``sim/engine/planning/planner.py``): the counterpart of vLLM's scheduler
  calling ``allocate_slots`` for every running request of a step, and the comparison the
  ratios are about.
* pagesim ``append``: one call per sequence per step (checked), like vLLM's per-request
  ``allocate_slots``; it pays a Python method call and argument checks per token, so it
  is shown for completeness (its floor is an empty method call, printed too).

Both sides store the tokens: pagesim writes each token id into its block's slots, vLLM's
request appends it to its token list (not in "BlockPool calls only" without caching).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script

from backend.blocks import BlockManager  # noqa: E402
from bench.allocator import empty_call_us, grow_one_by_one  # noqa: E402

NUM_SEQS, SEQ_LEN, BLOCK_SIZE = 1_000, 512, 16
VLLM_STEP = "vLLM manager decode step"
VLLM_POOL = "vLLM BlockPool calls only"


def token_table() -> np.ndarray:
    """Distinct token ids (no prefix hits even with caching on): row = sequence."""
    return np.arange(NUM_SEQS * SEQ_LEN, dtype=np.int32).reshape(NUM_SEQS, SEQ_LEN)


# -- pagesim -------------------------------------------------------------------------------
def pagesim_batched(caching: bool) -> float:
    """CPU seconds for the pattern through ``append_batch_trusted`` (one call a step)."""
    mgr = BlockManager(NUM_SEQS * SEQ_LEN // BLOCK_SIZE, BLOCK_SIZE, enable_prefix_caching=caching)
    tokens = token_table()
    columns = np.ascontiguousarray(tokens.T)  # one row per decode step, as the engine has
    seqs = np.arange(NUM_SEQS, dtype=np.int64)
    start = time.process_time()
    for seq in range(NUM_SEQS):
        mgr.allocate(seq, tokens[seq, :1])
    for step in range(1, SEQ_LEN):
        mgr.append_batch_trusted(seqs, columns[step])
    for seq in range(NUM_SEQS):
        mgr.free(seq)
    return time.process_time() - start


def pagesim_per_token(caching: bool) -> float:
    """CPU seconds for the pattern through ``append`` (one call a sequence a step)."""
    return grow_one_by_one(caching, time.process_time) * NUM_SEQS * SEQ_LEN


# -- vLLM ----------------------------------------------------------------------------------
def vllm_setup(vllm, caching: bool):
    """A fresh pool (one more block: vLLM keeps block 0 as its null block), vLLM's block
    hasher with its default hash (sha256 over pickle) when caching, and the sampled
    token ids as Python ints, one list per decode step."""
    hash_fn = vllm.hashing.sha256
    vllm.kv_cache_utils.init_none_hash(hash_fn)
    pool = vllm.BlockPool(NUM_SEQS * SEQ_LEN // BLOCK_SIZE + 1, caching, BLOCK_SIZE)
    hasher = vllm.kv_cache_utils.get_request_block_hasher(BLOCK_SIZE, hash_fn)
    return pool, hasher if caching else None, np.ascontiguousarray(token_table().T).tolist()


def vllm_manager_step(vllm, caching: bool) -> float:
    """CPU seconds for the pattern through vLLM's BlockPool, with what its single-type
    manager and the request do for every running request at every decode step (the
    running-request fast path, inlined: see the module docstring)."""
    pool, hasher, columns = vllm_setup(vllm, caching)
    cdiv, Request = vllm.cdiv, vllm.Request
    start = time.process_time()
    requests = [Request(str(seq), [columns[0][seq]], hasher) for seq in range(NUM_SEQS)]
    req_to_blocks: defaultdict[str, list] = defaultdict(list)  # as the manager keeps them
    num_cached_block: dict[str, int] = {}
    for request in requests:  # the prompt's block
        rid = request.request_id
        req_to_blocks[rid].extend(pool.get_new_blocks(cdiv(request.num_tokens, BLOCK_SIZE)))
        num_cached_block[rid] = 0
    for step in range(1, SEQ_LEN):
        sampled = columns[step]
        for seq, request in enumerate(requests):
            request.append_output_token_ids(sampled[seq])  # update_from_output
            rid, num_tokens = request.request_id, request.num_tokens
            # get_num_blocks_to_allocate, a running request's fast path, and the check
            num_required = cdiv(num_tokens, BLOCK_SIZE)
            if max(num_required - len(req_to_blocks.get(rid, ())), 0) > (
                pool.get_num_free_blocks()
            ):
                raise RuntimeError("the pool is sized for the whole pattern")
            # allocate_new_blocks
            blocks = req_to_blocks[rid]
            num_new = cdiv(num_tokens, BLOCK_SIZE) - len(blocks)
            if num_new > 0:
                blocks.extend(pool.get_new_blocks(num_new))
            if caching:  # cache_blocks
                cached = num_cached_block.get(rid, 0)
                hashed = len(request.block_hashes) * BLOCK_SIZE
                full = min(num_tokens, hashed) // BLOCK_SIZE
                if cached < full:
                    pool.cache_full_blocks(request, blocks, cached, full, BLOCK_SIZE, 0)
                    num_cached_block[rid] = full
    for request in requests:  # free: pop the request's blocks, release them tail first
        num_cached_block.pop(request.request_id, None)
        pool.free_blocks(reversed(req_to_blocks.pop(request.request_id)))
    return time.process_time() - start


def vllm_pool_only(vllm, caching: bool) -> float:
    """CPU seconds for the BlockPool calls this pattern needs and nothing else: a block
    for each request when it crosses a boundary (``get_new_blocks``), with caching each
    block hashed by vLLM's hasher and published (``cache_full_blocks``) when it fills, and
    ``free_blocks`` at the end. The driver knows from the pattern when that is, so no
    per-request work runs in the other steps: the pool's own cost, a lower bound."""
    pool, hasher, columns = vllm_setup(vllm, caching)
    Request, rows = vllm.Request, token_table().tolist()  # rows: one slice a block
    start = time.process_time()
    # (requests only with caching: their hasher hashes the blocks; without, nothing does)
    requests = (
        [Request(str(seq), [columns[0][seq]], hasher) for seq in range(NUM_SEQS)] if caching else []
    )
    blocks = [pool.get_new_blocks(1) for _ in range(NUM_SEQS)]
    for step in range(1, SEQ_LEN):
        if step % BLOCK_SIZE == 0:  # every request crosses into a new block
            for held in blocks:
                held.extend(pool.get_new_blocks(1))
        if caching and (step + 1) % BLOCK_SIZE == 0:  # every request fills its block
            first, full = max(step + 1 - BLOCK_SIZE, 1), (step + 1) // BLOCK_SIZE
            for seq, request in enumerate(requests):
                # the block's tokens join the request at once; its hasher hashes the block
                request.append_output_token_ids(rows[seq][first : step + 1])
                pool.cache_full_blocks(request, blocks[seq], full - 1, full, BLOCK_SIZE, 0)
    for held in blocks:
        pool.free_blocks(reversed(held))
    return time.process_time() - start


# -- the run -------------------------------------------------------------------------------
def measure(variants: dict, runs: int) -> dict[str, float]:
    """Median us per token step of each variant, the runs interleaved (the order rotates
    each round so that no variant always runs first)."""
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for round_ in range(runs):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            gc.collect()
            seconds[name].append(variants[name]())
    per_step = NUM_SEQS * SEQ_LEN
    return {name: statistics.median(values) / per_step * 1e6 for name, values in seconds.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-src", type=Path, help="a vLLM source tree (holds vllm/)")
    parser.add_argument("--runs", type=int, default=5, help="runs per variant (median)")
    parser.add_argument("--no-per-token", action="store_true", help="skip pagesim append")
    args = parser.parse_args(argv)

    vllm = None
    if args.vllm_src is None:
        print("no --vllm-src given: measuring pagesim alone (no vLLM comparison)")
    else:
        from bench.vllm_stubs import load_vllm_block_pool

        vllm = load_vllm_block_pool(args.vllm_src)

    cpu0, load0 = time.process_time(), os.getloadavg()[0]
    results = {}
    for caching in (False, True):
        variants = {"pagesim append_batch_trusted": lambda c=caching: pagesim_batched(c)}
        if not args.no_per_token:
            variants["pagesim append"] = lambda c=caching: pagesim_per_token(c)
        if vllm is not None:
            variants[VLLM_STEP] = lambda c=caching: vllm_manager_step(vllm, c)
            variants[VLLM_POOL] = lambda c=caching: vllm_pool_only(vllm, c)
        results[caching] = measure(variants, args.runs)
    load1 = os.getloadavg()[0]

    print(f"us of CPU per token step, median of {args.runs} interleaved runs")
    print(f"({NUM_SEQS:,} sequences to {SEQ_LEN} tokens, block size {BLOCK_SIZE})")
    for caching, figures in results.items():
        print(f"prefix caching {'on (no hits)' if caching else 'off'}:")
        for name, value in figures.items():
            print(f"  {name:<30} {value:8.4f}")
        for reference in (VLLM_STEP, VLLM_POOL):
            if reference in figures:
                for name, value in figures.items():
                    if name.startswith("pagesim"):
                        ratio = value / figures[reference]
                        print(f"  {name} / {reference}: {ratio:.2f}x")
    floor = empty_call_us(time.process_time)
    print(f"an empty Python method call: {floor:.3f} us (the per-token API's floor)")
    if vllm is not None:
        print(f"vLLM source: {vllm.source}")
    print(
        f"CPU {time.process_time() - cpu0:.1f} s in all; "
        f"1-min load average {load0:.2f} before, {load1:.2f} after"
    )


if __name__ == "__main__":
    main()
