"""The analytic cost model: hand-computed steps on the tiny model, roofline regimes,
monotonicity, tensor parallelism, public sanity figures, KV pool sizing, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from backend.step import Batch, PrefillChunk
from backend.transfer import CPU, DEVICE_COPY, GPU, SWAP_IN, SWAP_OUT, Medium, Transfer
from sim.catalog.cost_params import CostParams
from sim.catalog.hardware import HardwareSpec
from sim.catalog.links import LINKS, NIC_BYTES_S, NVME_READ_BYTES_S, NVME_READ_LATENCY_S
from sim.catalog.pool import kv_pool_blocks
from sim.catalog.presets import HARDWARE_PRESETS, MODEL_PRESETS
from sim.costs.analytic import LAYER_OPS, AnalyticCostModel
from sim.costs.vidur import DENSE_OPS

TINY = MODEL_PRESETS["tiny"]
LLAMA_8B = MODEL_PRESETS["llama-3-8b"]
H100 = HARDWARE_PRESETS["h100-sxm"]
NO_DECODES = np.zeros(0, dtype=np.int64)

# Round numbers so the hand computations below are easy to follow: no SMs (no tile
# quantisation), every efficiency 0.5, a roofline so sharp that it is a plain max.
TOY_GPU = HardwareSpec(
    name="toy",
    flops={"fp32": 1e9},
    mem_bandwidth_bytes_s=1e8,
    mem_capacity_bytes=10**6,
    host_link_bytes_s=1e7,
    interconnect_bytes_s=2e7,
    sustained_bandwidth_fraction=1.0,
)
TOY_PARAMS = CostParams(
    gemm_efficiency=0.5,
    memory_efficiency=0.5,
    decode_attention_efficiency=0.5,
    elementwise_efficiency=0.25,
    attention_efficiency=0.5,
    roofline_sharpness=1000.0,
    kernel_floor_s=1e-6,
    decode_attention_floor_s=2e-6,
    decode_seq_overhead_tokens=0.0,
    attention_cta_overhead_tiles=0.0,
    attention_tile=16,
    interconnect_efficiency=0.5,
    allreduce_latency_s=1e-5,
    cpu_step_overhead_s=1e-3,
    cpu_per_seq_overhead_s=1e-4,
)
FLOPS = 1e9 * 0.5
BANDWIDTH = 1e8 * 0.5
FLOOR = 1e-6


def tiny_model(tp: int = 1) -> AnalyticCostModel:
    return AnalyticCostModel(TINY, TOY_GPU, tensor_parallel=tp, params=TOY_PARAMS, block_size=4)


def gemm_by_hand(tokens: int, k: int, n: int) -> float:
    """Tiles of the next power of two of the rows (16 to 128) and no SMs: compute on the
    padded rows."""
    rows = min(128, max(16, 1 << (tokens - 1).bit_length()))
    padded_rows = rows * -(-tokens // rows)
    compute = 2 * padded_rows * k * n / FLOPS
    memory = (k * n + tokens * (k + n)) * 4 / BANDWIDTH
    return FLOOR + max(compute, memory)


def tiny_kv_bytes_per_token(kv_heads: int) -> int:
    return 2 * TINY.num_layers * kv_heads * TINY.head_dim * 4  # fp32


# --- exact small-number checks ---------------------------------------------------------


def test_tiny_layer_ops_by_hand():
    h, d, mlp = TINY.hidden_size, TINY.head_dim, TINY.intermediate_size
    tokens = 3
    ops = tiny_model().layer_ops(tokens)
    assert tuple(ops) == LAYER_OPS
    assert ops["attn_pre_proj"] == pytest.approx(gemm_by_hand(tokens, h, (4 + 2 * 2) * d))
    assert ops["attn_post_proj"] == pytest.approx(gemm_by_hand(tokens, 4 * d, h))
    assert ops["mlp_up_proj"] == pytest.approx(gemm_by_hand(tokens, h, 2 * mlp))
    assert ops["mlp_down_proj"] == pytest.approx(gemm_by_hand(tokens, mlp, h))
    elementwise = 1e8 * 0.25
    norm = FLOOR + 2 * tokens * h * 4 / elementwise
    assert ops["input_layernorm"] == ops["post_attention_layernorm"] == pytest.approx(norm)
    assert ops["attn_rope"] == pytest.approx(FLOOR + 2 * tokens * (4 + 2) * d * 4 / elementwise)
    assert ops["mlp_act"] == pytest.approx(FLOOR + 3 * tokens * mlp * 4 / elementwise)
    kv_layer = tiny_kv_bytes_per_token(2) // TINY.num_layers
    assert ops["kv_cache_save"] == pytest.approx(FLOOR + tokens * kv_layer / BANDWIDTH)
    assert ops["add"] == pytest.approx(FLOOR + 3 * tokens * h * 4 / BANDWIDTH)
    assert ops["all_reduce"] == 0.0  # one GPU


def test_tiny_decode_step_by_hand():
    contexts = [3, 5]
    cost = tiny_model().breakdown([], np.array(contexts, dtype=np.int64))
    ops = tiny_model().layer_ops(2)
    gemms = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
    assert cost.linear_s == pytest.approx(TINY.num_layers * sum(ops[g] for g in gemms))
    kv_layer = tiny_kv_bytes_per_token(2) // TINY.num_layers
    decode = 2e-6 + sum(contexts) * kv_layer / BANDWIDTH
    assert cost.decode_attention_s == pytest.approx(TINY.num_layers * decode)
    assert cost.prefill_attention_s == cost.allreduce_s == cost.data_movement_s == 0
    lm_head = (
        FLOOR
        + 2 * 2 * TINY.hidden_size * 4 / (1e8 * 0.25)  # final norm
        + gemm_by_hand(2, TINY.hidden_size, TINY.vocab_size)
        + FLOOR
        + 2 * 4 * 2 * TINY.vocab_size / (1e8 * 0.25)  # sampling reads fp32 logits
    )
    assert cost.lm_head_s == pytest.approx(lm_head)
    assert cost.cpu_s == pytest.approx(1e-3 + 2 * 1e-4)
    assert cost.gpu_s == pytest.approx(cost.total_s - cost.cpu_s)


def test_tiny_prefill_attention_by_hand():
    """Tile 16: a 40-token chunk after 20 cached tokens has 3 query tiles visiting
    ceil(36/16)=3, ceil(52/16)=4 and ceil(60/16)=4 KV tiles; no SMs, so only the total
    work counts."""
    tile_flops = 4 * 16 * 16 * TINY.head_dim
    per_layer = FLOOR + TINY.num_heads * (3 + 4 + 4) * tile_flops / FLOPS
    cost = tiny_model().breakdown([(20, 40)], NO_DECODES)
    assert cost.prefill_attention_s == pytest.approx(TINY.num_layers * per_layer)


def test_tiny_tensor_parallel_splits_work_and_adds_allreduce():
    tp, tokens = 2, 7
    ring_bytes = 2 * (tp - 1) / tp * tokens * TINY.hidden_size * 4
    allreduce = 2 * TINY.num_layers * (1e-5 + ring_bytes / (2e7 * 0.5))
    cost = tiny_model(tp).breakdown([(0, tokens)], NO_DECODES)
    assert cost.allreduce_s == pytest.approx(allreduce)
    ops = tiny_model(tp).layer_ops(tokens)
    assert ops["attn_post_proj"] == pytest.approx(gemm_by_hand(tokens, 2 * 16, 64))
    assert ops["mlp_down_proj"] == pytest.approx(gemm_by_hand(tokens, 64, 64))


def test_kv_heads_are_replicated_not_split_below_one_per_gpu():
    """tiny has 2 KV heads: at tp=4 each GPU still holds one, as at tp=2."""
    contexts = np.array([100, 200], dtype=np.int64)
    at_tp2 = tiny_model(2).breakdown([], contexts).decode_attention_s
    at_tp4 = tiny_model(4).breakdown([], contexts).decode_attention_s
    kv_layer = tiny_kv_bytes_per_token(1) // TINY.num_layers
    assert at_tp2 == pytest.approx(TINY.num_layers * (2e-6 + 300 * kv_layer / BANDWIDTH))
    assert at_tp4 == pytest.approx(at_tp2)


def test_swaps_and_copies_by_hand():
    block_bytes = 4 * tiny_kv_bytes_per_token(2)  # block_size 4
    swap = 3 * block_bytes / TOY_GPU.host_link_bytes_s
    copy = 2 * (2 * block_bytes) / BANDWIDTH  # read and write on the device
    moved = {SWAP_OUT: 2, SWAP_IN: 1, DEVICE_COPY: 2}
    cost = tiny_model().breakdown([], NO_DECODES, moved=moved)
    assert cost.data_movement_s == pytest.approx(swap + copy)
    assert cost.total_s == pytest.approx(swap + copy + 1e-3)  # a step, but no sequences


def test_a_disk_promotion_reads_the_whole_replicas_block_from_the_nvme():
    """A disk tier's hit comes into the CPU tier at the replica's NVMe read bandwidth
    (every rank's share of the block from one disk), plus one read latency a step."""
    tp = 2
    block_bytes = 4 * tiny_kv_bytes_per_token(1)  # a rank's share: 1 of tiny's 2 KV heads
    moved = {(Medium.DISK, Medium.CPU): 3, SWAP_IN: 3}
    cost = tiny_model(tp).breakdown([], NO_DECODES, moved=moved)
    disk = NVME_READ_LATENCY_S + 3 * tp * block_bytes / NVME_READ_BYTES_S
    assert cost.data_movement_s == pytest.approx(disk + 3 * block_bytes / TOY_GPU.host_link_bytes_s)


def test_a_remote_promotion_crosses_each_ranks_nic_as_the_network_link_measures():
    """A remote tier's hit: each rank reads its share over its own NIC at the "network"
    link's point-to-point fraction, plus that link's latency once a step."""
    block_bytes = 4 * tiny_kv_bytes_per_token(2)
    cost = tiny_model().breakdown([], NO_DECODES, moved={(Medium.REMOTE, Medium.CPU): 5})
    network = LINKS["network"]
    expected = network.latency_2_s + 5 * block_bytes / (NIC_BYTES_S * network.busbw_fraction_2)
    assert cost.data_movement_s == pytest.approx(expected)


def test_a_route_no_link_carries_is_refused_by_name():
    with pytest.raises(ValueError, match="from gpu to disk"):
        tiny_model().predict([], NO_DECODES, moved={(Medium.GPU, Medium.DISK): 1})


def test_empty_step_costs_nothing():
    assert tiny_model().predict([], NO_DECODES) == 0.0


def test_cpu_overhead_is_apart_from_gpu_time():
    contexts = np.array([10, 20, 30], dtype=np.int64)
    quiet = TOY_PARAMS.model_copy(update={"cpu_step_overhead_s": 0, "cpu_per_seq_overhead_s": 0})
    without = AnalyticCostModel(TINY, TOY_GPU, params=quiet).breakdown([(0, 8)], contexts)
    with_cpu = tiny_model().breakdown([(0, 8)], contexts)
    assert without.cpu_s == 0 and with_cpu.cpu_s == pytest.approx(1e-3 + 4 * 1e-4)
    assert with_cpu.gpu_s == pytest.approx(without.gpu_s)


def test_repeated_predictions_are_identical():
    """The per-token-count caches return what a fresh model computes."""
    contexts = np.array([64, 65, 66], dtype=np.int64)
    model = preset_model("llama-3-8b", "h100-sxm", 1)
    first = model.breakdown([(0, 100)], contexts)
    assert model.breakdown([(0, 100)], contexts) == first
    assert preset_model("llama-3-8b", "h100-sxm", 1).breakdown([(0, 100)], contexts) == first


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
        transfers=(
            Transfer(3, 0, GPU, CPU),
            Transfer(4, 1, GPU, CPU),
            Transfer(5, 6, CPU, GPU),
            Transfer(1, 2),
        ),
    )
    moved = {SWAP_OUT: 2, SWAP_IN: 1, DEVICE_COPY: 1}
    expected = model.predict([(0, 5), (16, 9)], np.array([7, 40, 2]), moved=moved)
    assert model.execute(batch) == pytest.approx(expected)
    assert model.execute(batch) > model.execute(batch._replace(transfers=batch.transfers[:2]))


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
    assert cost.predict(list(prefills), np.array(decodes), moved={SWAP_OUT: 1}) > base


def batch_of(chunks, contexts, swaps: int = 0, copies: int = 0) -> Batch:
    """A batch of prefill ``chunks`` ``(start, tokens)``, decodes of ``contexts`` and moves."""
    out, back = swaps // 2, swaps - swaps // 2
    moves = (
        *(Transfer(i, i + 1, GPU, CPU) for i in range(out)),
        *(Transfer(i, i + 1, CPU, GPU) for i in range(back)),
        *(Transfer(i, i + 1) for i in range(copies)),
    )
    return Batch(
        prefills=tuple(
            PrefillChunk(i, start, np.zeros(n, dtype=np.int32))
            for i, (start, n) in enumerate(chunks)
        ),
        decode_seq_ids=np.arange(len(contexts), dtype=np.int64),
        decode_context_lens=np.array(contexts, dtype=np.int64),
        decode_token_ids=np.zeros(len(contexts), dtype=np.int32),
        transfers=moves,
    )


step_shapes = st.tuples(
    st.lists(st.tuples(st.integers(0, 4096), st.integers(1, 512)), max_size=3),
    st.lists(st.integers(1, 8192), max_size=40),
    st.integers(0, 3),
    st.integers(0, 2),
)


@given(st.sampled_from(["tiny", "llama-3-8b", "llama-3-70b"]), tensor_parallel, step_shapes)
def test_execute_predict_and_breakdown_agree_bit_for_bit(model_name, tp, shape):
    """execute reads the batch itself (no BatchShape, no StepCost): the same float."""
    chunks, contexts, swaps, copies = shape
    model = preset_model(model_name, "h100-sxm", tp)
    batch = batch_of(chunks, contexts, swaps, copies)
    seconds = model.execute(batch)
    assert type(seconds) is float
    assert seconds.hex() == model.predict(*batch.shape()).hex()
    moved = {SWAP_OUT: swaps // 2, SWAP_IN: swaps - swaps // 2, DEVICE_COPY: copies}
    total = model.breakdown(*batch.shape()[:2], moved=moved).total_s
    assert seconds.hex() == total.hex()


@given(st.lists(step_shapes, min_size=1, max_size=12))
def test_cached_parts_are_never_stale(shapes):
    """The per-count caches (dense layers by tokens, LM head and CPU by sequences) give
    what a fresh model computes, whatever the model predicted before, and are the
    model's own: of two models with different parameters used in turn, each gives its
    own parameters' figures (checked against uncached sums: the CPU term, and the GEMMs
    of :meth:`layer_ops` in the model's order)."""
    slow = TOY_PARAMS.model_copy(update={"cpu_per_seq_overhead_s": 1e-2, "kernel_floor_s": 0})
    models = [
        (AnalyticCostModel(TINY, TOY_GPU, params=p, block_size=4), p) for p in (TOY_PARAMS, slow)
    ]
    gemms = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
    for chunks, contexts, swaps, copies in shapes:
        batch = batch_of(chunks, contexts, swaps, copies)
        num_seqs, tokens = len(chunks) + len(contexts), sum(n for _, n in chunks) + len(contexts)
        for used, params in models:
            fresh = AnalyticCostModel(TINY, TOY_GPU, params=params, block_size=4)
            assert used.execute(batch).hex() == fresh.execute(batch).hex()
            cost = used.breakdown(*batch.shape()[:2])
            assert cost == fresh.breakdown(*batch.shape()[:2])
            if num_seqs:
                cpu = params.cpu_step_overhead_s + num_seqs * params.cpu_per_seq_overhead_s
                ops = used.layer_ops(tokens)
                assert cost.cpu_s == cpu
                assert cost.linear_s == TINY.num_layers * sum(ops[name] for name in gemms)


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
    assert faster_by(LLAMA_8B, H100, [], decodes, "flops") < 1.02
    # the CPU overhead (2 ms of 22) does not shrink with bandwidth
    assert faster_by(LLAMA_8B, H100, [], decodes, "bandwidth") > 1.6


def test_long_prefill_is_compute_bound():
    # Norms, rotary and activation stay memory bound (about a tenth of a prefill layer).
    prefills = [(0, 8192)]
    assert faster_by(LLAMA_8B, H100, prefills, NO_DECODES, "bandwidth") < 1.1
    assert faster_by(LLAMA_8B, H100, prefills, NO_DECODES, "flops") > 1.7


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
    # 81,559 MiB (what CUDA reports) x 0.9 - 16 GB weights - ~1 GB activations ~ 60 GB of
    # KV at 128 KiB a token
    assert 430_000 < tokens < 480_000
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
    [("gemm_efficiency", 0.0), ("memory_efficiency", 1.5), ("cpu_step_overhead_s", -1e-3)],
)
def test_bad_cost_params(field, value):
    with pytest.raises(ValidationError, match=field):
        CostParams(**{field: value})
    with pytest.raises(ValidationError, match="unknown field; did you mean 'gemm_efficiency'"):
        CostParams(gemm_eficiency=0.5)


def test_bad_prefill_chunk():
    with pytest.raises(ValueError, match="num_tokens >= 1"):
        tiny_model().predict([(0, 0)], NO_DECODES)
    with pytest.raises(ValueError, match="start >= 0"):
        tiny_model().predict([(-1, 4)], NO_DECODES)


# --- against published measurements ------------------------------------------------------

#: Whole-layer times (us) of Meta-Llama-3-8B on one A100 from Vidur's published profiles
#: (microsoft/vidur, data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B, MIT licence):
#: the sum of the per-layer operators of mlp.csv at the step's token count plus the
#: attention of attention.csv (its KV-save operator left out, see
#: bench/costmodel_vs_profiles.py). Keys: ("decode", batch, context),
#: ("prefill", tokens), ("mixed", prefill tokens, decode batch, context).
A100_LLAMA_3_8B_LAYER_US = {
    ("decode", 1, 4096): 328.0,
    ("decode", 8, 128): 324.0,
    ("decode", 16, 1024): 380.5,
    ("decode", 64, 2048): 690.0,
    ("decode", 128, 4096): 1717.0,
    ("decode", 256, 1024): 1244.0,
    ("prefill", 256): 631.0,
    ("prefill", 1024): 2460.0,
    ("prefill", 2048): 4807.0,
    ("prefill", 4096): 9500.0,
    # every prompt of 128 / 512 / 1024 / 2048 tokens with decodes of (8, 256), (32, 512),
    # (64, 2048) and (128, 4096) whose token count the profile measured
    ("mixed", 128, 8, 256): 595.5,
    ("mixed", 128, 32, 512): 620.0,
    ("mixed", 128, 64, 2048): 878.0,
    ("mixed", 128, 128, 4096): 1929.0,
    ("mixed", 512, 8, 256): 1275.5,
    ("mixed", 512, 32, 512): 1405.5,
    ("mixed", 512, 64, 2048): 1637.5,
    ("mixed", 512, 128, 4096): 2859.5,
    ("mixed", 1024, 32, 512): 2628.5,
    ("mixed", 1024, 64, 2048): 2995.0,
    ("mixed", 1024, 128, 4096): 3978.0,
    ("mixed", 2048, 32, 512): 5009.0,
    ("mixed", 2048, 64, 2048): 5366.0,
    ("mixed", 2048, 128, 4096): 6387.5,
}


def _layer_us(model: AnalyticCostModel, key: tuple) -> float:
    regime, *shape = key
    chunks = [(0, shape[0])] if regime in ("prefill", "mixed") else []
    batch, context = (shape[-2], shape[-1]) if regime in ("decode", "mixed") else (0, 0)
    tokens = sum(n for _, n in chunks) + batch
    ops = model.layer_ops(tokens)
    dense = sum(ops[op] for op in DENSE_OPS) + ops["kv_cache_save"]
    return 1e6 * (dense + sum(model.attention_layer(chunks, batch, batch * context)))


def test_layer_time_is_within_the_target_of_published_a100_measurements():
    """Issue 10's target, per regime: mean absolute error <= 10 %, no point beyond 20 %
    (a wave more or less of a GEMM at ~520 tokens costs up to 18 %)."""
    model = AnalyticCostModel(LLAMA_8B, HARDWARE_PRESETS["a100-80gb"])
    errors: dict[str, list[float]] = {}
    for key, measured in A100_LLAMA_3_8B_LAYER_US.items():
        error = (_layer_us(model, key) - measured) / measured
        assert abs(error) <= 0.20, (key, error)
        errors.setdefault(key[0], []).append(abs(error))
    for regime, values in errors.items():
        assert sum(values) / len(values) <= 0.10, regime


def test_with_cpu_overlap_a_step_takes_the_longer_of_gpu_and_cpu():
    model_spec, gpu = MODEL_PRESETS["llama-3-8b"], HARDWARE_PRESETS["h100-sxm"]
    serial = AnalyticCostModel(model_spec, gpu, params=CostParams(cpu_step_overhead_s=0.02))
    overlap = AnalyticCostModel(
        model_spec, gpu, params=CostParams(cpu_step_overhead_s=0.02, cpu_overlap=True)
    )
    small, big = np.full(4, 100), np.full(256, 4000)
    for lens in (small, big):
        parts = serial.breakdown([], lens)
        hidden = overlap.breakdown([], lens)
        assert parts.total_s == pytest.approx(parts.gpu_s + parts.cpu_s)
        assert hidden.total_s == pytest.approx(max(parts.gpu_s, parts.cpu_s))
        assert overlap.predict([], lens) == hidden.total_s
    # the 20 ms of CPU outlasts a 4-sequence step and hides under a 256 x 4k one
    assert overlap.predict([], small) == pytest.approx(0.02 + 4 * 12e-6)  # + per sequence
    assert overlap.breakdown([], big).cpu_s == 0.0


@pytest.mark.parametrize("allocator", ["contiguous-max", "contiguous-oracle"])
def test_a_swap_costs_the_same_from_paged_and_contiguous_allocators(allocator):
    """A 160-token swap-out moves the same bytes whichever allocator held them: ten
    16-token blocks from the paged manager, one 160-slot range from a contiguous
    baseline. It once cost 16x more from the baseline (a Transfer a slot, each priced as
    a block)."""
    from sim.config.loader import validate_scenario
    from sim.run.build import build_allocator, build_executor

    costs = {}
    for name in ("paged", allocator):
        scenario = validate_scenario(
            {
                "model": "llama-3-8b",
                "hardware": "h100-sxm",
                "cache": {"allocator": name, "num_blocks": 1024, "num_cpu_blocks": 64},
                "preemption": {"mode": "swap"},
            }
        )
        alloc = build_allocator(scenario)
        alloc.allocate(0, np.arange(160), max_new_tokens=16)
        moves = alloc.swap_out(0)
        empty = np.zeros(0, np.int64)
        batch = Batch((), empty, empty, np.zeros(0, np.int32), transfers=tuple(moves))
        costs[name] = build_executor(scenario, alloc).execute(batch)
    assert costs["paged"] > 0
    assert costs[allocator] == pytest.approx(costs["paged"], rel=1e-12)
