"""Kernel times of the analytic model: tile and wave quantisation, the smooth roofline,
FlashAttention's per-CTA cost and decode attention's per-sequence cost, each by hand or
against the published figure its constant comes from."""

from __future__ import annotations

import math

import pytest

from sim.catalog.cost_params import CostParams
from sim.catalog.hardware import HardwareSpec
from sim.catalog.presets import HARDWARE_PRESETS
from sim.costs.kernels import GpuKernels

H100 = HARDWARE_PRESETS["h100-sxm"]
A100 = HARDWARE_PRESETS["a100-80gb"]

# 10 SMs at 1e12 FLOP/s each, 1e12 B/s sustained; efficiencies 1 so sums are exact.
TOY = HardwareSpec(
    name="toy",
    flops={"bf16": 1e13},
    mem_bandwidth_bytes_s=1e12,
    mem_capacity_bytes=10**9,
    host_link_bytes_s=1e10,
    interconnect_bytes_s=1e11,
    num_sms=10,
    sustained_bandwidth_fraction=1.0,
)
EXACT = CostParams(
    gemm_efficiency=1.0,
    memory_efficiency=1.0,
    decode_attention_efficiency=1.0,
    elementwise_efficiency=1.0,
    attention_efficiency=1.0,
    interconnect_efficiency=1.0,
    kernel_floor_s=0.0,
    roofline_sharpness=1000.0,
    attention_cta_overhead_tiles=0.0,
)


def toy(**overrides) -> GpuKernels:
    return GpuKernels(TOY, EXACT.model_copy(update=overrides), dtype_bytes=2)


def test_gemm_is_wave_quantised_once_tiles_outnumber_sms():
    k = toy()
    big_k = 1 << 20  # compute bound: memory is a rounding error next to the math
    tile_s = 2 * 128 * 128 * big_k / 1e12  # one 128x128 tile on one SM
    # 10 tiles (one wave) and 11 tiles (two waves) for 128 rows
    assert k.gemm(128, big_k, 10 * 128) == pytest.approx(tile_s, rel=1e-3)
    assert k.gemm(128, big_k, 11 * 128) == pytest.approx(2 * tile_s, rel=1e-3)
    assert k.gemm(128, big_k, 20 * 128) == pytest.approx(2 * tile_s, rel=1e-3)


def test_gemm_below_a_wave_uses_every_sm_by_split_k():
    k = toy()
    big_k = 1 << 20
    # 4 tiles on 10 SMs: the padded work shared by all SMs
    assert k.gemm(128, big_k, 4 * 128) == pytest.approx(2 * 128 * 4 * 128 * big_k / 1e13, rel=1e-3)


def test_skinny_gemms_pad_to_short_tiles():
    k = toy()
    big_k = 1 << 20
    sixteen = k.gemm(1, big_k, 128)
    assert sixteen == pytest.approx(2 * 16 * 128 * big_k / 1e13, rel=1e-3)
    assert k.gemm(16, big_k, 128) == pytest.approx(sixteen)  # same 16-row tile
    assert k.gemm(17, big_k, 128) == pytest.approx(2 * sixteen, rel=1e-3)  # 32 rows
    assert k.gemm(100, big_k, 128) == pytest.approx(8 * sixteen, rel=1e-3)  # 128 rows


def test_gemv_is_memory_bound_and_pays_the_kernel_floor():
    fast_gpu = TOY.model_copy(update={"flops": {"bf16": 1e16}})  # math is free
    floored = GpuKernels(fast_gpu, EXACT.model_copy(update={"kernel_floor_s": 3e-6}), 2)
    bytes_moved = (4096 * 4096 + 1 * (4096 + 4096)) * 2
    assert GpuKernels(fast_gpu, EXACT, 2).gemm(1, 4096, 4096) == pytest.approx(
        bytes_moved / 1e12, rel=1e-3
    )
    assert floored.gemm(1, 4096, 4096) == pytest.approx(3e-6 + bytes_moved / 1e12, rel=1e-3)


def test_smooth_roofline_exceeds_both_bounds_at_the_ridge():
    sharp, smooth = toy(), toy(roofline_sharpness=3.0)
    tokens, size = 1024, 8192
    compute = sharp._gemm_compute_s(tokens, size, size)
    memory = (size * size + tokens * 2 * size) * 2 / 1e12
    assert sharp.gemm(tokens, size, size) == pytest.approx(max(compute, memory))
    cubic = (compute**3 + memory**3) ** (1 / 3)
    assert smooth.gemm(tokens, size, size) == pytest.approx(cubic)
    assert cubic > max(compute, memory)


def test_no_sm_count_means_no_quantisation():
    flat = GpuKernels(TOY.model_copy(update={"num_sms": None}), EXACT, 2)
    big_k = 1 << 20
    assert flat.gemm(128, big_k, 11 * 128) == pytest.approx(
        2 * 128 * 11 * 128 * big_k / 1e13, rel=1e-3
    )


def test_prefill_attention_is_bound_by_its_longest_cta():
    k = toy()
    tile_on_sm = 4 * 128 * 128 * 128 / 1e12
    # one head, one 128-token chunk: one CTA visiting one KV tile, on one of 10 SMs
    assert k.prefill_attention([(0, 128)], heads=1, head_dim=128) == pytest.approx(tile_on_sm)
    # 40 heads x (1 + 2) tiles for 256 tokens: 120 tile-visits over 10 SMs
    assert k.prefill_attention([(0, 256)], heads=40, head_dim=128) == pytest.approx(12 * tile_on_sm)
    # a chunk after 1000 cached tokens: q-tiles visit 9 and then ceil(1256/128) = 10
    assert k.prefill_attention([(1000, 256)], heads=1, head_dim=128) == pytest.approx(
        10 * tile_on_sm
    )


def test_flashattention_efficiency_follows_the_fa3_curve():
    """FA3's published causal head-dim-128 forward throughput on H100 SXM (Shah et al.
    2024, Fig. 5; 16k tokens per batch, 16 heads): the CTA overhead must reproduce the
    rise from short to long sequences within 20 %."""
    published = {512: 292e12, 1024: 423e12, 2048: 521e12, 4096: 579e12, 16384: 616e12}
    k = GpuKernels(H100, CostParams(kernel_floor_s=0.0), dtype_bytes=2)
    for seqlen, tflops in published.items():
        batch = 16384 // seqlen
        chunks = [(0, seqlen)] * batch
        flops = batch * 16 * 4 * 128 * seqlen * seqlen / 2
        achieved = flops / k.prefill_attention(chunks, heads=16, head_dim=128)
        assert achieved == pytest.approx(tflops, rel=0.20), seqlen


def test_decode_attention_per_sequence_cost_matches_flashinfer_utilisation():
    """FlashInfer's batch decode on H100 (batch 64): 41 / 64 / 83 / 88 % of the datasheet
    bandwidth at 32 / 128 / 512 / 1024 tokens (flashinfer.ai blog, 2024-02-02)."""
    k = GpuKernels(H100, CostParams(decode_attention_floor_s=0.0), dtype_bytes=2)
    kv_bytes = 2 * 8 * 128 * 2  # one layer of a Llama-3-8B token
    for tokens, utilisation in {32: 0.41, 128: 0.64, 512: 0.83, 1024: 0.88}.items():
        seconds = k.decode_attention(64, 64 * tokens, kv_bytes)
        achieved = 64 * tokens * kv_bytes / seconds / H100.mem_bandwidth_bytes_s
        assert achieved == pytest.approx(utilisation, abs=0.08), tokens


def test_streaming_and_elementwise_by_hand():
    k = toy(kernel_floor_s=2e-6, memory_efficiency=0.5, elementwise_efficiency=0.25)
    assert k.streaming(1e6) == pytest.approx(2e-6 + 1e6 / 0.5e12)
    assert k.elementwise(1e6) == pytest.approx(2e-6 + 1e6 / 0.25e12)


def test_allreduce_ring_by_hand():
    k = toy(allreduce_latency_s=1e-5, interconnect_efficiency=0.5)
    assert k.allreduce(1e6, 1) == 0.0
    ring = 2 * 3 / 4 * 1e6
    assert k.allreduce(1e6, 4) == pytest.approx(1e-5 + ring / 0.5e11)


def test_decode_gemv_on_a100_streams_weights_near_the_measured_rate():
    """Vidur's A100 profiles stream Llama-3-8B's 4096 x 28672 up/gate weights at one token
    in 142 us; the model's sustained bandwidth x memory efficiency gives within 10 %."""
    k = GpuKernels(A100, CostParams(), dtype_bytes=2)
    assert k.gemm(1, 4096, 28672) == pytest.approx(142e-6, rel=0.10)
    assert math.isfinite(k.gemm(4096, 4096, 28672))


def test_allreduce_uses_the_measured_figures_of_the_link():
    """With no override, an all-reduce over NVLink costs vLLM's custom-kernel latency and
    the nccl-tests bus bandwidth fraction; over PCIe through host memory far more; and
    outside a CUDA graph the custom kernel's eager floor is added where that kernel takes
    the message (below 8 MiB), not where NCCL does."""
    from sim.catalog.links import (
        CUSTOM_KERNEL_MAX_BYTES,
        EAGER_LATENCY_S,
        busbw_fraction,
        link_latency_s,
    )

    params = CostParams()
    nvlink = GpuKernels(H100, params, dtype_bytes=2)
    size = 2 * 8192 * 4096  # 64 MiB: 8,192 tokens of a 4,096-wide bf16 residual
    ring = 2 * 1 / 2 * size
    expected = link_latency_s("nvlink", 2) + ring / (450e9 * busbw_fraction("nvlink", 2))
    assert nvlink.allreduce(size, 2) == pytest.approx(expected)
    assert nvlink.allreduce(size, 2, graphed=False) == pytest.approx(expected)  # NCCL's
    small = CUSTOM_KERNEL_MAX_BYTES - 2  # the largest bf16 message the custom kernel takes
    assert nvlink.allreduce(small, 2, graphed=False) == pytest.approx(
        nvlink.allreduce(small, 2) + EAGER_LATENCY_S
    )
    geforce = GpuKernels(HARDWARE_PRESETS["rtx-4090"], params, dtype_bytes=2)
    assert geforce.allreduce(size, 2) > 15 * nvlink.allreduce(size, 2)
    assert geforce.allreduce(size, 2, graphed=False) == geforce.allreduce(size, 2)  # NCCL
    # 8 GPUs over PCIe pay more latency per call than 2 (NCCL's ring beyond 2 GPUs)
    pcie = GpuKernels(HARDWARE_PRESETS["l40s"], params, dtype_bytes=2)
    assert pcie.allreduce(64, 8) > 4 * pcie.allreduce(64, 2)


def test_a_message_the_custom_kernel_takes_moves_at_its_measured_bandwidth():
    """Below vLLM's 8 MiB limit the card's measured custom-kernel fraction prices the
    bytes (interpolated between measured GPU counts); at the limit and above, nccl-tests'
    fraction of the link; two PCIe GPUs use it, more fall back to NCCL; a scenario's
    interconnect_efficiency wins over both."""
    from sim.catalog.links import CUSTOM_KERNEL_MAX_BYTES, busbw_fraction, link_latency_s

    h100 = GpuKernels(H100, CostParams(), dtype_bytes=2)
    decode = 2 * 128 * 8192  # 2 MiB: 128 tokens of an 8,192-wide bf16 residual
    for gpus, fraction in ((2, 0.58), (4, 0.46), (6, 0.44), (8, 0.42)):
        ring = 2 * (gpus - 1) / gpus * decode
        expected = link_latency_s("nvlink", gpus) + ring / (450e9 * fraction)
        assert h100.allreduce(decode, gpus) == pytest.approx(expected)
    large = CUSTOM_KERNEL_MAX_BYTES
    expected = link_latency_s("nvlink", 2) + large / (450e9 * busbw_fraction("nvlink", 2))
    assert h100.allreduce(large, 2) == pytest.approx(expected)
    server = GpuKernels(HARDWARE_PRESETS["rtx-pro-6000-server"], CostParams(), dtype_bytes=2)
    assert server.allreduce(decode, 2) == pytest.approx(
        link_latency_s("pcie-p2p", 2) + decode / (64e9 * 0.21)
    )
    four = 2 * 3 / 4 * decode / (64e9 * busbw_fraction("pcie-p2p", 4))
    assert server.allreduce(decode, 4) == pytest.approx(link_latency_s("pcie-p2p", 4) + four)
    chosen = GpuKernels(H100, CostParams(interconnect_efficiency=0.9), dtype_bytes=2)
    assert chosen.allreduce(decode, 2) == pytest.approx(
        link_latency_s("nvlink", 2) + decode / (450e9 * 0.9)
    )


def test_a_scenario_efficiency_wins_over_the_cards_measured_one():
    l40s = HARDWARE_PRESETS["l40s"]
    measured = GpuKernels(l40s, CostParams(), dtype_bytes=2)
    chosen = GpuKernels(l40s, CostParams(gemm_efficiency=0.5), dtype_bytes=2)
    assert measured._gemm_flops == pytest.approx(l40s.peak_flops(2) * 0.743)
    assert chosen._gemm_flops == pytest.approx(l40s.peak_flops(2) * 0.5)
