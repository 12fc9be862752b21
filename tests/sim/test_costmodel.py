"""The analytic cost model: hand-computed steps on the tiny model, roofline regimes,
monotonicity, tensor parallelism, public sanity figures, KV pool sizing, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from backend.base import BlockMove
from backend.step import Batch, PrefillChunk
from sim.costmodel import AnalyticCostModel, CostParams, kv_pool_blocks
from sim.hardware import HARDWARE_PRESETS, MODEL_PRESETS, HardwareSpec

TINY = MODEL_PRESETS["tiny"]
LLAMA_8B = MODEL_PRESETS["llama-3-8b"]
H100 = HARDWARE_PRESETS["h100-sxm"]
NO_DECODES = np.zeros(0, dtype=np.int64)

# Round numbers so the hand computations below are easy to follow.
TOY_GPU = HardwareSpec(
    name="toy",
    flops={"fp32": 1e9},
    mem_bandwidth_bytes_s=1e8,
    mem_capacity_bytes=10**6,
    host_link_bytes_s=1e7,
    interconnect_bytes_s=2e7,
)
TOY_PARAMS = CostParams(
    flops_efficiency=0.5,
    bandwidth_efficiency=0.5,
    step_overhead_s=1e-3,
    per_seq_overhead_s=1e-4,
    allreduce_latency_s=1e-5,
)
FLOPS = 1e9 * 0.5
BANDWIDTH = 1e8 * 0.5


def tiny_model(tp: int = 1) -> AnalyticCostModel:
    return AnalyticCostModel(TINY, TOY_GPU, tensor_parallel=tp, params=TOY_PARAMS, block_size=4)


def tiny_weights() -> tuple[int, int]:
    """(decoder matmul weights, LM-head weights) of the tiny model, from its shape."""
    q = TINY.num_heads * TINY.head_dim
    kv = TINY.num_kv_heads * TINY.head_dim
    attention = TINY.hidden_size * (q + 2 * kv) + q * TINY.hidden_size
    mlp = 3 * TINY.hidden_size * TINY.intermediate_size
    return TINY.num_layers * (attention + mlp), TINY.vocab_size * TINY.hidden_size


def tiny_kv_bytes_per_token(kv_heads: int) -> int:
    return 2 * TINY.num_layers * kv_heads * TINY.head_dim * 4  # fp32


# --- exact small-number checks ---------------------------------------------------------


def test_tiny_decode_step_by_hand():
    weights, lm_head = tiny_weights()
    contexts = [3, 5]
    tokens = seqs = len(contexts)
    linear_flops = 2 * weights * tokens + 2 * lm_head * seqs
    linear_bytes = (weights + lm_head) * 4
    linear = max(linear_flops / FLOPS, linear_bytes / BANDWIDTH)
    per_pair = 4 * TINY.num_layers * TINY.num_heads * TINY.head_dim
    attention_flops = per_pair * sum(contexts)
    kv_bytes = tiny_kv_bytes_per_token(2) * sum(c + 1 for c in contexts)  # read + write
    decode = max(attention_flops / FLOPS, kv_bytes / BANDWIDTH)
    overhead = 1e-3 + seqs * 1e-4

    cost = tiny_model().breakdown([], np.array(contexts, dtype=np.int64))
    assert cost.linear_s == pytest.approx(linear)
    assert cost.decode_attention_s == pytest.approx(decode)
    assert cost.prefill_attention_s == cost.allreduce_s == cost.data_movement_s == 0
    assert cost.overhead_s == pytest.approx(overhead)
    assert cost.total_s == pytest.approx(linear + decode + overhead)


def test_tiny_prefill_chunk_by_hand():
    weights, lm_head = tiny_weights()
    start, num_tokens = 4, 3
    # token i of the chunk attends to the cached prefix and to itself and earlier chunk tokens
    pairs = sum(start + i + 1 for i in range(num_tokens))
    attention_flops = 4 * TINY.num_layers * TINY.num_heads * TINY.head_dim * pairs
    kv_bytes = tiny_kv_bytes_per_token(2) * (start + num_tokens + num_tokens)
    prefill = max(attention_flops / FLOPS, kv_bytes / BANDWIDTH)
    linear_flops = 2 * weights * num_tokens + 2 * lm_head * 1
    linear = max(linear_flops / FLOPS, (weights + lm_head) * 4 / BANDWIDTH)

    cost = tiny_model().breakdown([(start, num_tokens)], NO_DECODES)
    assert cost.prefill_attention_s == pytest.approx(prefill)
    assert cost.linear_s == pytest.approx(linear)
    assert cost.total_s == pytest.approx(linear + prefill + 1e-3 + 1e-4)


def test_tiny_compute_bound_prefill_by_hand():
    """Long enough chunks that matmuls and attention both hit the FLOP roofline; the LM
    head is charged once per chunk, not once per token."""
    weights, lm_head = tiny_weights()
    chunks = [(0, 200), (10, 50)]
    tokens = 250
    linear_flops = 2 * weights * tokens + 2 * lm_head * len(chunks)
    assert linear_flops / FLOPS > (weights + lm_head) * 4 / BANDWIDTH
    pairs = sum(start + i + 1 for start, n in chunks for i in range(n))
    attention_flops = 4 * TINY.num_layers * TINY.num_heads * TINY.head_dim * pairs
    kv_bytes = tiny_kv_bytes_per_token(2) * sum(start + 2 * n for start, n in chunks)
    assert attention_flops / FLOPS > kv_bytes / BANDWIDTH

    cost = tiny_model().breakdown(chunks, NO_DECODES)
    assert cost.linear_s == pytest.approx(linear_flops / FLOPS)
    assert cost.prefill_attention_s == pytest.approx(attention_flops / FLOPS)
    assert cost.overhead_s == pytest.approx(1e-3 + 2 * 1e-4)


def test_tiny_tensor_parallel_splits_work_and_adds_allreduce():
    weights, lm_head = tiny_weights()
    tp, tokens = 2, 7
    ring_bytes = 2 * (tp - 1) / tp * tokens * TINY.hidden_size * 4
    allreduce = 2 * TINY.num_layers * (ring_bytes / TOY_GPU.interconnect_bytes_s + 1e-5)
    linear_bytes = (weights + lm_head) * 4 / tp

    cost = tiny_model(tp).breakdown([(0, tokens)], NO_DECODES)
    assert cost.allreduce_s == pytest.approx(allreduce)
    assert cost.linear_s >= linear_bytes / BANDWIDTH
    assert cost.linear_s == pytest.approx(tiny_model(1).breakdown([(0, tokens)], NO_DECODES)[0] / 2)


def test_kv_heads_are_replicated_not_split_below_one_per_gpu():
    """tiny has 2 KV heads: at tp=4 each GPU still holds one, as at tp=2."""
    contexts = np.array([100, 200], dtype=np.int64)
    at_tp2 = tiny_model(2).breakdown([], contexts).decode_attention_s
    at_tp4 = tiny_model(4).breakdown([], contexts).decode_attention_s
    kv_bytes = tiny_kv_bytes_per_token(1) * (300 + 2)
    assert at_tp2 == pytest.approx(kv_bytes / BANDWIDTH)
    assert at_tp4 == pytest.approx(at_tp2)


def test_swaps_and_copies_by_hand():
    block_bytes = 4 * tiny_kv_bytes_per_token(2)  # block_size 4
    swap = 3 * block_bytes / TOY_GPU.host_link_bytes_s
    copy = 2 * (2 * block_bytes) / BANDWIDTH  # read and write on the device
    cost = tiny_model().breakdown([], NO_DECODES, swap_blocks=3, copy_blocks=2)
    assert cost.data_movement_s == pytest.approx(swap + copy)
    assert cost.total_s == pytest.approx(swap + copy + 1e-3)  # a step, but no sequences


def test_empty_step_costs_nothing():
    assert tiny_model().predict([], NO_DECODES) == 0.0


def test_execute_reads_the_batch_like_predict():
    model = tiny_model()
    batch = Batch(
        prefills=(
            PrefillChunk(seq_id=1, start=0, token_ids=np.arange(5, dtype=np.int32)),
            PrefillChunk(seq_id=2, start=16, token_ids=np.arange(9, dtype=np.int32)),
        ),
        decode_seq_ids=np.array([3, 4, 5], dtype=np.int64),
        decode_context_lens=np.array([7, 40, 2], dtype=np.int64),
        decode_token_ids=np.zeros(3, dtype=np.int32),
        copies=(BlockMove(1, 2),),
        swap_out=(BlockMove(3, 0), BlockMove(4, 1)),
        swap_in=(BlockMove(5, 6),),
    )
    expected = model.predict([(0, 5), (16, 9)], np.array([7, 40, 2]), swap_blocks=3, copy_blocks=1)
    assert model.execute(batch) == pytest.approx(expected)
    assert model.execute(batch) > model.execute(batch._replace(swap_in=()))


# --- monotonicity (property tests over presets) ----------------------------------------

presets = st.sampled_from(["tiny", "llama-3-8b", "llama-3-70b", "opt-13b", "qwen2.5-7b"])
gpus = st.sampled_from(sorted(HARDWARE_PRESETS))
tensor_parallel = st.sampled_from([1, 2, 4])
chunks = st.lists(st.tuples(st.integers(0, 4096), st.integers(1, 4096)), max_size=4).map(tuple)
contexts = st.lists(st.integers(1, 8192), max_size=64)


def preset_model(model: str, gpu: str, tp: int) -> AnalyticCostModel:
    return AnalyticCostModel(MODEL_PRESETS[model], HARDWARE_PRESETS[gpu], tensor_parallel=tp)


@given(presets, gpus, tensor_parallel, chunks, contexts, st.data())
def test_more_work_is_never_faster(model, gpu, tp, prefills, decodes, data):
    cost = preset_model(model, gpu, tp)
    base = cost.predict(list(prefills), np.array(decodes, dtype=np.int64))
    grown_decodes = list(decodes)
    if grown_decodes and data.draw(st.booleans(), label="lengthen a context"):
        i = data.draw(st.integers(0, len(grown_decodes) - 1), label="which")
        grown_decodes[i] += data.draw(st.integers(1, 4096), label="by")
    else:
        grown_decodes.append(data.draw(st.integers(1, 8192), label="new decode"))
    grown_prefills = list(prefills)
    if grown_prefills and data.draw(st.booleans(), label="grow a chunk"):
        i = data.draw(st.integers(0, len(grown_prefills) - 1), label="which chunk")
        start, n = grown_prefills[i]
        grown_prefills[i] = (start + data.draw(st.integers(0, 512)), n + 1)
    grown = cost.predict(grown_prefills, np.array(grown_decodes, dtype=np.int64))
    assert grown >= base
    assert cost.predict(list(prefills), np.array(decodes), swap_blocks=1) > base


# --- regimes on Llama-3-8B / H100 --------------------------------------------------------


def faster_by(model_spec, gpu: HardwareSpec, prefills, decodes, doubled: str) -> float:
    """Step time on ``gpu`` over step time with its FLOP/s or bandwidth doubled."""
    if doubled == "flops":
        update = {"flops": {k: 2 * v for k, v in gpu.flops.items()}}
    else:
        update = {"mem_bandwidth_bytes_s": 2 * gpu.mem_bandwidth_bytes_s}
    before = AnalyticCostModel(model_spec, gpu).predict(prefills, decodes)
    return before / AnalyticCostModel(model_spec, gpu.model_copy(update=update)).predict(
        prefills, decodes
    )


def test_large_decode_batch_is_memory_bound():
    decodes = np.full(128, 2048, dtype=np.int64)
    assert faster_by(LLAMA_8B, H100, [], decodes, "flops") == pytest.approx(1.0)
    assert faster_by(LLAMA_8B, H100, [], decodes, "bandwidth") > 1.7


def test_long_prefill_is_compute_bound():
    prefills = [(0, 8192)]
    assert faster_by(LLAMA_8B, H100, prefills, NO_DECODES, "bandwidth") == (pytest.approx(1.0))
    assert faster_by(LLAMA_8B, H100, prefills, NO_DECODES, "flops") > 1.9


def test_tensor_parallel_speeds_up_large_batches():
    llama_70b = MODEL_PRESETS["llama-3-70b"]
    decodes = np.full(256, 1024, dtype=np.int64)
    times = [
        AnalyticCostModel(llama_70b, H100, tensor_parallel=tp).predict([(0, 2048)], decodes)
        for tp in (2, 4, 8)
    ]
    assert times[0] > times[1] > times[2]
    assert times[0] / times[2] > 2.0  # all-reduce and fixed overheads keep it below 4x
    one, two = (
        AnalyticCostModel(LLAMA_8B, H100, tensor_parallel=tp).predict([(0, 8192)], NO_DECODES)
        for tp in (1, 2)
    )
    assert two < 0.6 * one


# --- sanity against public figures -------------------------------------------------------


def test_llama_3_8b_batch_1_decode_on_h100_takes_6_to_10_ms():
    # 16.06 GB of bf16 weights / 3.35 TB/s (H100 SXM datasheet) = 4.8 ms ideal; engines
    # report ~6.5-8 ms per output token at batch 1 (130-150 tok/s single-stream in the
    # vLLM / Lambda Labs H100 benchmark write-ups).
    step = AnalyticCostModel(LLAMA_8B, H100).predict([], np.array([1024]))
    assert 6e-3 <= step <= 10e-3


def test_llama_3_8b_2k_prefill_on_h100_is_tens_of_ms():
    # 2 x 7.5e9 matmul weights x 2048 tokens = 3.1e13 FLOP; at H100's 989 TFLOP/s dense
    # bf16 that is 31 ms at 100 % MFU and 100 ms at 31 % MFU. Reported TTFTs for a lone
    # 2k prompt sit in that window; queueing-free, a tuned engine reaches 50-60 % MFU.
    step = AnalyticCostModel(LLAMA_8B, H100).predict([(0, 2048)], NO_DECODES)
    assert 35e-3 <= step <= 200e-3


# --- KV pool sizing ----------------------------------------------------------------------


def test_kv_pool_blocks_by_hand():
    gpu = TOY_GPU.model_copy(update={"mem_capacity_bytes": 4 * 10**6})
    reserve = 100_000
    free = 4e6 * 0.5 - TINY.weight_bytes - reserve
    block_bytes = 16 * tiny_kv_bytes_per_token(2)
    expected = int(free // block_bytes)
    assert expected > 0
    assert kv_pool_blocks(TINY, gpu, 1, 16, 0.5, reserve) == expected
    # two GPUs: half the weights and half the KV heads each
    free_tp2 = 4e6 * 0.5 - TINY.weight_bytes / 2 - reserve
    assert kv_pool_blocks(TINY, gpu, 2, 16, 0.5, reserve) == int(
        free_tp2 // (16 * tiny_kv_bytes_per_token(1))
    )


def test_llama_3_8b_on_h100_holds_about_what_vllm_reports():
    blocks = kv_pool_blocks(LLAMA_8B, H100, block_size=16)
    tokens = blocks * 16
    # 80 GB x 0.9 - 16 GB weights - ~1 GB activations ~ 55 GB of KV at 128 KiB a token
    assert 380_000 < tokens < 440_000
    assert kv_pool_blocks(LLAMA_8B, H100, block_size=32) == pytest.approx(blocks / 2, abs=1)
    assert kv_pool_blocks(LLAMA_8B, H100, gpu_memory_utilization=0.95) > blocks


def test_model_too_big_for_the_gpu_is_a_clear_error():
    llama_70b = MODEL_PRESETS["llama-3-70b"]
    with pytest.raises(ValueError, match="does not leave room.*weights 141"):
        kv_pool_blocks(llama_70b, H100)
    assert kv_pool_blocks(llama_70b, H100, tensor_parallel=4) > 0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"tensor_parallel": 3}, "must divide num_heads"),
        ({"tensor_parallel": 0}, ">= 1"),
        ({"block_size": 0}, "block_size"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
        ({"activation_reserve_bytes": -1}, "activation_reserve_bytes"),
    ],
)
def test_kv_pool_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        kv_pool_blocks(LLAMA_8B, H100, **kwargs)


# --- bad input -----------------------------------------------------------------------------


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="tensor_parallel=3 must divide num_heads=32"):
        AnalyticCostModel(LLAMA_8B, H100, tensor_parallel=3)
    # 6 splits 12 query heads, but neither splits nor replicates 4 KV heads evenly
    odd_heads = TINY.model_copy(update={"num_heads": 12, "num_kv_heads": 4})
    with pytest.raises(ValueError, match="num_kv_heads=4"):
        AnalyticCostModel(odd_heads, TOY_GPU, tensor_parallel=6)
    AnalyticCostModel(LLAMA_8B, H100, tensor_parallel=16)  # 8 KV heads, each on two GPUs
    with pytest.raises(ValueError, match="block_size"):
        AnalyticCostModel(LLAMA_8B, H100, block_size=0)
    only_bf16 = H100.model_copy(update={"flops": {"bf16": 1e15}})
    with pytest.raises(ValueError, match="no FLOP/s for 4-byte"):
        AnalyticCostModel(TINY, only_bf16)


@pytest.mark.parametrize(
    "field, value",
    [("flops_efficiency", 0.0), ("bandwidth_efficiency", 1.5), ("step_overhead_s", -1e-3)],
)
def test_bad_cost_params(field, value):
    with pytest.raises(ValidationError, match=field):
        CostParams(**{field: value})
    with pytest.raises(ValidationError, match="unknown field; did you mean 'flops_efficiency'"):
        CostParams(flop_efficiency=0.5)


def test_bad_prefill_chunk():
    with pytest.raises(ValueError, match="num_tokens >= 1"):
        tiny_model().predict([(0, 0)], NO_DECODES)
    with pytest.raises(ValueError, match="start >= 0"):
        tiny_model().predict([(-1, 4)], NO_DECODES)
