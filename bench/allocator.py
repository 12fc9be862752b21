"""Speed of the paged block manager (microseconds per operation, median of 5 runs).

(a) 1,000 sequences grow token by token to 512 tokens at block size 16 (a 1-token
    prompt, then one ``append`` per token, round robin), then are freed; caching off.
(b) the same with prefix caching on (distinct tokens, so no hits: hashing cost only).
(c) 1,000 requests sharing a 1,024-token prefix (plus 16 tokens of their own) are
    allocated, all hitting the cache, then freed; per request and per prompt token.
(d) pattern (a) through ``append_batch``: one call per decode step for all sequences.
(e) pattern (b) through ``append_batch`` (prefix caching on, no hits).
(d) and (e) are also split by phase, and the cost of an empty method call is printed as
the floor under any per-token API such as (a) and (b).

Per token step = total time / (sequences x 512), allocation and free included; the
time to build each call's argument is included too (it is the caller's real cost).

Run: .venv/bin/python bench/allocator.py
vLLM's BlockPool on the same patterns, in the same process: bench/vs_vllm_block_pool.py.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code

from backend.blocks import BlockManager  # noqa: E402

NUM_SEQS, SEQ_LEN, BLOCK_SIZE = 1_000, 512, 16
PREFIX_LEN, SUFFIX_LEN = 1_024, 16
RUNS = 5


def grow_one_by_one(caching: bool, clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds (by ``clock``) per token step of the pattern through ``append``, one call a
    sequence a step."""
    mgr = BlockManager(NUM_SEQS * SEQ_LEN // BLOCK_SIZE, BLOCK_SIZE, enable_prefix_caching=caching)
    # Distinct token ids everywhere: no prefix hits even with caching on.
    tokens = np.arange(NUM_SEQS * SEQ_LEN, dtype=np.int32).reshape(NUM_SEQS, SEQ_LEN)
    start = clock()
    for seq in range(NUM_SEQS):
        mgr.allocate(seq, tokens[seq, :1])
    for step in range(1, SEQ_LEN):
        for seq in range(NUM_SEQS):
            mgr.append(seq, tokens[seq, step : step + 1])
    for seq in range(NUM_SEQS):
        mgr.free(seq)
    return (clock() - start) / (NUM_SEQS * SEQ_LEN)


PHASES = ("allocate", "steps without crossings", "steps where all cross", "free")


def grow_batched(caching: bool = False) -> dict[str, float]:
    """Seconds per token step spent in each of PHASES: allocating the 1,000 one-token
    prompts, the decode steps in which no sequence crosses a block boundary, those in
    which all of them do (every BLOCK_SIZE-th), and freeing."""
    mgr = BlockManager(NUM_SEQS * SEQ_LEN // BLOCK_SIZE, BLOCK_SIZE, enable_prefix_caching=caching)
    tokens = np.arange(NUM_SEQS * SEQ_LEN, dtype=np.int32).reshape(NUM_SEQS, SEQ_LEN)
    columns = np.ascontiguousarray(tokens.T)  # one row per decode step
    seq_ids = np.arange(NUM_SEQS)
    spent = dict.fromkeys(PHASES, 0.0)
    start = time.perf_counter()
    for seq in range(NUM_SEQS):
        mgr.allocate(seq, tokens[seq, :1])
    spent["allocate"] = time.perf_counter() - start
    for step in range(1, SEQ_LEN):
        start = time.perf_counter()
        mgr.append_batch(seq_ids, columns[step])
        spent[PHASES[2] if step % BLOCK_SIZE == 0 else PHASES[1]] += time.perf_counter() - start
    start = time.perf_counter()
    for seq in range(NUM_SEQS):
        mgr.free(seq)
    spent["free"] = time.perf_counter() - start
    return {phase: seconds / (NUM_SEQS * SEQ_LEN) for phase, seconds in spent.items()}


def median_phases_us(measure: Callable[[], dict[str, float]]) -> tuple[float, dict[str, float]]:
    """The median total and the median of each phase, in microseconds."""
    runs = [measure() for _ in range(RUNS)]
    total = statistics.median(sum(run.values()) for run in runs) * 1e6
    return total, {phase: statistics.median(run[phase] for run in runs) * 1e6 for phase in PHASES}


def empty_call_us(clock: Callable[[], float] = time.perf_counter) -> float:
    """What one Python method call with one argument costs here (the floor of any
    per-token API), by ``clock``."""

    class Empty:
        def append(self, token):
            pass

    target, calls = Empty(), 200_000
    start = clock()
    for _ in range(calls):
        target.append(0)
    return (clock() - start) / calls * 1e6


def shared_prefix() -> float:
    prompt_blocks = (PREFIX_LEN + SUFFIX_LEN) // BLOCK_SIZE
    mgr = BlockManager(
        PREFIX_LEN // BLOCK_SIZE + NUM_SEQS * prompt_blocks, BLOCK_SIZE, enable_prefix_caching=True
    )
    rng = np.random.default_rng(0)
    prefix = rng.integers(0, 32_000, PREFIX_LEN, dtype=np.int32)
    prompts = [
        np.concatenate([prefix, rng.integers(0, 32_000, SUFFIX_LEN, dtype=np.int32)])
        for _ in range(NUM_SEQS + 1)
    ]
    mgr.allocate(NUM_SEQS, prompts[NUM_SEQS])  # warm the cache (not timed)
    start = time.perf_counter()
    for seq in range(NUM_SEQS):
        assert mgr.allocate(seq, prompts[seq]) == PREFIX_LEN
    for seq in range(NUM_SEQS):
        mgr.free(seq)
    return (time.perf_counter() - start) / NUM_SEQS


def median_us(measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(RUNS)) * 1e6


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # --help
    a = median_us(lambda: grow_one_by_one(caching=False))
    b = median_us(lambda: grow_one_by_one(caching=True))
    c = median_us(shared_prefix)
    d, d_phases = median_phases_us(grow_batched)
    e, e_phases = median_phases_us(lambda: grow_batched(caching=True))
    prompt_tokens = PREFIX_LEN + SUFFIX_LEN
    rows = [
        ("(a) append, caching off", f"{a:.3f}", "us / token step"),
        ("(b) append, caching on, no hits", f"{b:.3f}", "us / token step"),
        (
            "(c) shared 1,024-token prefix",
            f"{c:.1f}",
            f"us / request ({c / prompt_tokens:.4f} / token)",
        ),
        ("(d) append_batch, caching off", f"{d:.3f}", "us / token step"),
        ("(e) append_batch, caching on, no hits", f"{e:.3f}", "us / token step"),
    ]
    print(f"pagesim BlockManager, median of {RUNS} runs")
    for name, value, unit in rows:
        print(f"  {name:<38} {value:>9}  {unit}")
    for name, phases in (("(d)", d_phases), ("(e)", e_phases)):
        split = "; ".join(f"{phase} {value:.4f}" for phase, value in phases.items())
        print(f"  {name} by phase (us / token step): {split}")
    print(f"an empty Python method call: {empty_call_us():.3f} us (a per-token call's floor)")
    print(
        "vLLM's BlockPool on (a)/(d) and (b)/(e), measured beside pagesim in one process: "
        ".venv/bin/python bench/vs_vllm_block_pool.py --vllm-src PATH"
    )
    print("reproduce: .venv/bin/python bench/allocator.py")


if __name__ == "__main__":
    main()
