"""Paging never changes the answer: greedy generation through the paged pool (block
manager + executor) against the contiguous baseline (dense KV per sequence, torch SDPA),
for plain batches with chunked prefill, prefix-cache hits, a prefix loaded back from the
offload tier, a prompt handed off from a prefill pool to a decode pool, preemption by
recompute, a swap round trip and copy-on-write forks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backend.connectors.offload import TierSpec
from backend.connectors.peer import PeerConnector, read_moves
from backend.real.model import LlamaModel
from backend.real.reference import ContiguousRunner
from backend.transfer import CPU, DISK

from .harness import TINY, PagedHarness
from .helpers import TRITON_DEVICE, needs_triton

NEW_TOKENS = 24
LOGIT_ATOL = {torch.float64: 1e-9, torch.float32: 2e-4}


def _prompt(rng, length: int) -> list[int]:
    return rng.integers(0, TINY.vocab_size, size=length).tolist()


def _contiguous(dtype, seed=0, device="cpu") -> ContiguousRunner:
    return ContiguousRunner(LlamaModel(TINY, dtype=dtype, seed=seed, device=device))


def _assert_same(paged_tokens, paged_logits, expected_tokens, expected_logits, dtype):
    assert paged_tokens == expected_tokens
    got = torch.stack([logit.cpu() for logit in paged_logits])
    torch.testing.assert_close(got, expected_logits.cpu(), atol=LOGIT_ATOL[dtype], rtol=0)


def _run_concurrently(harness: PagedHarness, rng, prompts: list[list[int]], max_chunk: int):
    """A continuous-batching loop: every step carries the next prompt chunk (random size)
    of each prefilling sequence and one decode for each of the others."""
    progress = {s: 0 for s in range(len(prompts))}
    for s, prompt in enumerate(prompts):
        progress[s] = harness.admit(s, prompt)
    tokens = {s: [] for s in progress}
    logits = {s: [] for s in progress}
    while any(len(t) < NEW_TOKENS for t in tokens.values()):
        chunks, decodes = [], {}
        for s, prompt in enumerate(prompts):
            if len(tokens[s]) >= NEW_TOKENS:
                continue
            if progress[s] < len(prompt):
                size = int(rng.integers(1, max_chunk + 1))
                chunks.append((s, progress[s], prompt[progress[s] : progress[s] + size]))
                progress[s] = min(len(prompt), progress[s] + size)
            else:
                decodes[s] = tokens[s][-1]
        sampled, step_logits = harness.step(chunks, decodes)
        for s in sampled:
            finished_prompt = progress[s] >= len(prompts[s])
            if finished_prompt and (s in decodes or not tokens[s]):
                tokens[s].append(sampled[s])
                logits[s].append(step_logits[s])
    return tokens, logits


@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_paged_batch_with_chunked_prefill_equals_contiguous(rng, block_size):
    prompts = [_prompt(rng, int(rng.integers(3, 40))) for _ in range(4)]
    harness = PagedHarness(
        num_blocks=4 * (40 + NEW_TOKENS) // block_size + 8, block_size=block_size
    )
    tokens, logits = _run_concurrently(harness, rng, prompts, max_chunk=13)
    for s, prompt in enumerate(prompts):
        expected = _contiguous(torch.float64).generate(s, prompt, NEW_TOKENS)
        _assert_same(tokens[s], logits[s], *expected, torch.float64)


@needs_triton
def test_triton_paged_generation_equals_contiguous(rng):
    # Few, tiny launches: the interpreter runs every Triton program in Python.
    prompts = [_prompt(rng, 11), _prompt(rng, 6)]
    harness = PagedHarness(
        num_blocks=16, block_size=4, dtype=torch.float32, use_triton=True, device=TRITON_DEVICE
    )
    tokens, logits = {}, {}
    for s, prompt in enumerate(prompts):
        harness.admit(s, prompt)
        first, first_logits = harness.prefill(s, prompt)
        rest, rest_logits = harness.decode(s, first, 5)
        tokens[s], logits[s] = [first, *rest], [first_logits, *rest_logits]
    for s, prompt in enumerate(prompts):
        expected = _contiguous(torch.float32, device=TRITON_DEVICE).generate(s, prompt, 6)
        _assert_same(tokens[s], logits[s], *expected, torch.float32)


def test_prefix_cache_hit_equals_full_recomputation(rng):
    block_size = 4
    shared = _prompt(rng, 3 * block_size)
    first = shared + _prompt(rng, 5)
    second = shared + _prompt(rng, 7)
    harness = PagedHarness(num_blocks=64, block_size=block_size, prefix_caching=True)
    harness.admit(0, first)
    harness.prefill(0, first)
    skip = harness.admit(1, second)
    assert skip == len(shared)  # the test is only meaningful with a real hit
    token, logit = harness.prefill(1, second, start=skip)
    rest, rest_logits = harness.decode(1, token, NEW_TOKENS - 1)
    expected = _contiguous(torch.float64).generate(1, second, NEW_TOKENS)
    _assert_same([token, *rest], [logit, *rest_logits], *expected, torch.float64)


@pytest.mark.parametrize("disk", [False, True], ids=["cpu tier", "promoted from disk"])
def test_a_prefix_loaded_from_the_offload_tier_equals_full_recomputation(rng, disk):
    """With a disk tier below a one-block CPU tier, each shared block comes back from
    the disk through that CPU block (promotion, then load, in order)."""
    block_size = 4
    shared = _prompt(rng, 3 * block_size)
    first = shared + _prompt(rng, 5)
    second = shared + _prompt(rng, 7)
    harness = PagedHarness(
        num_blocks=16,
        block_size=block_size,
        prefix_caching=True,
        tiers=(TierSpec(CPU, 1), TierSpec(DISK, 32)) if disk else (TierSpec(CPU, 32),),
    )
    harness.admit(0, first)
    harness.prefill(0, first)  # its full blocks are stored to the tier after the step
    harness.alloc.free(0)
    harness.alloc.evict(16)  # the device's prefix cache forgets them
    skip = harness.admit(1, second)
    served = harness.seam.connector.tier_stats[1 if disk else 0]
    assert skip == len(shared) and served.loaded_blocks == 3
    token, logit = harness.prefill(1, second, start=skip)  # the loads run first
    rest, rest_logits = harness.decode(1, token, NEW_TOKENS - 1)
    expected = _contiguous(torch.float64).generate(1, second, NEW_TOKENS)
    _assert_same([token, *rest], [logit, *rest_logits], *expected, torch.float64)


@pytest.mark.parametrize(
    "decode_hit", [False, True], ids=["no hit", "a prefix hit on the decode side"]
)
def test_a_prompt_handed_off_between_two_pools_generates_the_colocated_answer(rng, decode_hit):
    """Prefill on one KV pool, its blocks held; the decode pool allocates the whole
    prompt, reads every block after its own prefix hit from the first pool (the peer
    connector's moves, the partial last block too), marks the prompt computed and
    computes only the last prompt token, as vLLM's decode instance does: it generates
    exactly what one pool generates."""
    block_size = 4
    shared = _prompt(rng, 2 * block_size)
    prompt = shared + _prompt(rng, 2 * block_size + 3)
    prefill = PagedHarness(num_blocks=32, block_size=block_size)
    decode = PagedHarness(num_blocks=32, block_size=block_size, prefix_caching=True)
    prefill.admit(0, prompt)
    prefill.prefill(0, prompt)  # (sequence 0 stays allocated: held for the reader)
    if decode_hit:  # the decode pool computed the shared prefix for another request
        other = shared + _prompt(rng, 3)
        decode.admit(9, other)
        decode.prefill(9, other)
    peer = PeerConnector(block_size)
    peer.expect(7, 0)
    hit = decode.alloc.allocate(5, np.asarray(prompt, dtype=np.int32), computed_tokens=0)
    assert hit == (len(shared) if decode_hit else 0)
    load = peer.start_load(7, hit, len(prompt))
    assert load.blocks == -(-len(prompt) // block_size) - hit // block_size
    moves = read_moves(load, prefill.alloc.block_table(0), decode.alloc.block_table(5))
    decode.executor.kv.receive(moves, prefill.executor.kv)
    decode.alloc.mark_computed(5, len(prompt))
    token, logit = decode.prefill(5, prompt, start=len(prompt) - 1)
    rest, rest_logits = decode.decode(5, token, NEW_TOKENS - 1)
    expected = _contiguous(torch.float64).generate(0, prompt, NEW_TOKENS)
    _assert_same([token, *rest], [logit, *rest_logits], *expected, torch.float64)


def test_preemption_by_recompute_resumes_the_same_generation(rng):
    prompt = _prompt(rng, 10)
    harness = PagedHarness(num_blocks=24, block_size=4)
    harness.admit(0, prompt)
    token, logit = harness.prefill(0, prompt)
    before, before_logits = harness.decode(0, token, 8)
    generated = [token, *before]
    harness.alloc.free(0)  # preempted: its blocks go back and are reused below
    intruder = _prompt(rng, 60)
    harness.admit(1, intruder)
    harness.prefill(1, intruder)
    harness.alloc.free(1)
    # Recompute: the prompt plus everything generated but the last token (not yet fed).
    resumed = prompt + generated[:-1]
    harness.admit(0, resumed)
    harness.prefill(0, resumed, chunk=7)
    after, after_logits = harness.decode(0, generated[-1], NEW_TOKENS - len(generated))
    expected = _contiguous(torch.float64).generate(0, prompt, NEW_TOKENS)
    paged_logits = [logit, *before_logits, *after_logits]
    # The recompute step re-samples generated[-1]; its logits were checked before it.
    _assert_same(generated + after, paged_logits, *expected, torch.float64)


def test_swap_round_trip_resumes_the_same_generation(rng):
    prompt = _prompt(rng, 9)
    harness = PagedHarness(num_blocks=12, block_size=4, num_cpu_blocks=12)
    harness.admit(0, prompt)
    token, logit = harness.prefill(0, prompt)
    before, before_logits = harness.decode(0, token, 6)
    harness.swap_out(0)
    intruder = _prompt(rng, 40)  # takes every device block the sequence held
    harness.admit(1, intruder)
    harness.prefill(1, intruder)
    harness.alloc.free(1)
    harness.swap_in(0)
    after, after_logits = harness.decode(0, before[-1], NEW_TOKENS - 7)
    expected = _contiguous(torch.float64).generate(0, prompt, NEW_TOKENS)
    tokens = [token, *before, *after]
    _assert_same(tokens, [logit, *before_logits, *after_logits], *expected, torch.float64)


def test_forked_sequences_diverge_through_copy_on_write(rng):
    block_size = 4
    prompt = _prompt(rng, 2 * block_size + 2)  # a partly filled, shared last block
    harness = PagedHarness(num_blocks=32, block_size=block_size)
    harness.admit(0, prompt)
    token, _ = harness.prefill(0, prompt)
    harness.fork(0, 1)
    # Like n=2 sampling: the child feeds a different first token, so a missing or wrong
    # copy-on-write would let one sequence overwrite the other's K/V.
    child_token = (token + 1) % TINY.vocab_size
    sampled, _ = harness.step(decodes={0: token, 1: child_token})
    parent, child = [sampled[0]], [sampled[1]]
    for _ in range(NEW_TOKENS - 2):
        sampled, _ = harness.step(decodes={0: parent[-1], 1: child[-1]})
        parent.append(sampled[0])
        child.append(sampled[1])

    assert harness.copies_done >= 1  # the shared last block was copied before a write
    runner = _contiguous(torch.float64)
    runner.feed(0, prompt)
    runner.fork(0, 1)
    for seq, first, got in ((0, token, parent), (1, child_token, child)):
        feed, want = first, []
        for _ in got:
            feed = int(runner.feed(seq, [feed]).argmax())
            want.append(feed)
        assert got == want
