"""The hardware presets: one GPU's datasheet figures each, with what has been measured
on it, every figure with its source (re-exported by :mod:`sim.catalog.presets`).
"""

from __future__ import annotations

from sim.catalog.hardware import HardwareSpec

# --- hardware presets ---------------------------------------------------------------------
# Capacities are the datasheet's decimal GB (the usable figure nvidia-smi shows is a few
# percent higher, so this errs on the small side). Links are one direction: the datasheets
# quote NVLink and PCIe bidirectional totals, which we halve. SM counts: A100 whitepaper
# ("A100 Tensor Core GPU has 108 SMs"); H100 SXM5 132 (Chips and Cheese, "Nvidia's H100:
# Funny L2, and Tons of Bandwidth", 2023, and deviceQuery); H200 132 (same GH100 die; 132
# in te42kyfo/gpu-benches' H200 run); L4 58 and A40 84 (deviceQuery / gpu-benches).
# Sustained bandwidth fractions are read-bound streaming kernels over the datasheet: the
# BabelStream Dot kernel in Azure's AI-benchmarking-guide (ND A100 v4: 1.75 of 2.039 TB/s;
# ND H100 v5: 3.18 of 3.35; ND H200 v5: 4.48 of 4.8) and the read kernel of
# te42kyfo/gpu-benches' gpu-stream (A100 40GB 1490 of 1555 GB/s, A40 679 of 696); L4 has
# no published run and keeps the 0.9 default.
_GB = 1e9


_TF = 1e12

_MIB = 1 << 20


HARDWARE_PRESETS: dict[str, HardwareSpec] = {
    # NVIDIA A100 Tensor Core GPU datasheet (SXM, 40GB HBM2): 1,555 GB/s, NVLink 600 GB/s,
    # PCIe Gen4 64 GB/s
    "a100-40gb": HardwareSpec(
        name="a100-40gb",
        flops={"fp32": 19.5 * _TF, "tf32": 156 * _TF, "bf16": 312 * _TF, "fp16": 312 * _TF},
        mem_bandwidth_bytes_s=1555 * _GB,
        mem_capacity_bytes=40 * 10**9,
        host_link_bytes_s=32 * _GB,
        interconnect_bytes_s=300 * _GB,
        num_sms=108,
        sustained_bandwidth_fraction=0.958,
        custom_allreduce_busbw={2: 0.64, 4: 0.45, 8: 0.47},  # [aic] a100_sxm vLLM 0.14.0 (links.py)
    ),
    # NVIDIA A100 Tensor Core GPU datasheet (SXM, 80GB HBM2e): 2,039 GB/s
    "a100-80gb": HardwareSpec(
        name="a100-80gb",
        flops={"fp32": 19.5 * _TF, "tf32": 156 * _TF, "bf16": 312 * _TF, "fp16": 312 * _TF},
        mem_bandwidth_bytes_s=2039 * _GB,
        mem_capacity_bytes=80 * 10**9,
        host_link_bytes_s=32 * _GB,
        interconnect_bytes_s=300 * _GB,
        num_sms=108,
        sustained_bandwidth_fraction=0.86,
        custom_allreduce_busbw={2: 0.64, 4: 0.45, 8: 0.47},  # [aic] a100_sxm vLLM 0.14.0 (links.py)
    ),
    # NVIDIA H100 Tensor Core GPU datasheet (SXM5, 80GB HBM3): 3.35 TB/s, NVLink 900 GB/s,
    # PCIe Gen5 128 GB/s; dense = half the "with sparsity" figures
    "h100-sxm": HardwareSpec(
        name="h100-sxm",
        flops={
            "fp32": 67 * _TF,
            "tf32": 494.5 * _TF,
            "bf16": 989.5 * _TF,
            "fp16": 989.5 * _TF,
            "fp8": 1979 * _TF,
        },
        mem_bandwidth_bytes_s=3350 * _GB,
        mem_capacity_bytes=80 * 10**9,
        cuda_memory_bytes=81559 * _MIB,  # nvidia-smi: "81559MiB" on H100 80GB HBM3
        host_link_bytes_s=64 * _GB,
        interconnect_bytes_s=450 * _GB,
        num_sms=132,
        sustained_bandwidth_fraction=0.95,
        custom_allreduce_busbw={2: 0.58, 4: 0.46, 8: 0.42},  # [aic] vLLM 0.14.0 (links.py)
    ),
    # NVIDIA H200 Tensor Core GPU datasheet (SXM, 141GB HBM3e): 4.8 TB/s, same compute and
    # links as H100 SXM
    "h200": HardwareSpec(
        name="h200",
        flops={
            "fp32": 67 * _TF,
            "tf32": 494.5 * _TF,
            "bf16": 989.5 * _TF,
            "fp16": 989.5 * _TF,
            "fp8": 1979 * _TF,
        },
        mem_bandwidth_bytes_s=4800 * _GB,
        mem_capacity_bytes=141 * 10**9,
        host_link_bytes_s=64 * _GB,
        interconnect_bytes_s=450 * _GB,
        num_sms=132,
        sustained_bandwidth_fraction=0.93,
        custom_allreduce_busbw={2: 0.58, 4: 0.50, 8: 0.21},  # [aic] h200_sxm vLLM 0.14.0 (links.py)
    ),
    # NVIDIA L4 Tensor Core GPU datasheet (24GB GDDR6): 300 GB/s, PCIe Gen4 x16 64 GB/s,
    # no NVLink (tensor parallelism goes over PCIe). At 72 W its clock drops under load:
    # torch.matmul best 70.89 TFLOPS (0.586; zzc0721/torch-performance-test-data@9d82827
    # database.md).
    "l4": HardwareSpec(
        name="l4",
        flops={
            "fp32": 30.3 * _TF,
            "tf32": 60 * _TF,
            "bf16": 121 * _TF,
            "fp16": 121 * _TF,
            "fp8": 242 * _TF,
        },
        mem_bandwidth_bytes_s=300 * _GB,
        mem_capacity_bytes=24 * 10**9,
        host_link_bytes_s=32 * _GB,
        interconnect_bytes_s=32 * _GB,
        num_sms=58,
        gemm_efficiency=0.586,
    ),
    # NVIDIA A40 datasheet (48GB GDDR6): 696 GB/s, 149.7 TFLOPS dense BF16/FP16 tensor
    # (299.4 with sparsity), 37.4 FP32, PCIe Gen4 x16 64 GB/s, NVLink bridge 112.5 GB/s
    # bidirectional between pairs
    "a40": HardwareSpec(
        name="a40",
        flops={
            "fp32": 37.4 * _TF,
            "tf32": 74.8 * _TF,
            "bf16": 149.7 * _TF,
            "fp16": 149.7 * _TF,
        },
        mem_bandwidth_bytes_s=696 * _GB,
        mem_capacity_bytes=48 * 10**9,
        host_link_bytes_s=32 * _GB,
        interconnect_bytes_s=56.25 * _GB,
        num_sms=84,
        sustained_bandwidth_fraction=0.976,
    ),
    # --- PCIe cards, B200, H20, GH200, MI300X. Measured figures (gemm_efficiency: best
    # dense BF16 matmul over the dense peak; sustained_bandwidth_fraction: a streaming
    # kernel over the datasheet bandwidth) and the link each card's TP group uses
    # (sim.catalog.links). Sources by key:
    #   [matmul] zzc0721/torch-performance-test-data@9d82827 database.md (torch.matmul,
    #     the best of square sizes 1024-10240); [mamf] stas00/ml-engineering@744d01e
    #     compute/accelerator/README.md "Maximum Achievable Matmul FLOPS"; [aic] NVIDIA
    #     ai-dynamo/aiconfigurator@095f58a systems/<gpu>.yaml and its measured data;
    #     [stream] te42kyfo/gpu-benches@1c36d50 gpu-stream/<gpu>.txt (read kernel);
    #     [babel] Azure/AI-benchmarking-guide BabelStream Dot (read-bound).
    # NVIDIA L40S datasheet: 362.05 TFLOPS dense BF16 (733 with sparsity), 733 FP8, 91.6
    # FP32, 864 GB/s GDDR6, 142 SMs, PCIe Gen4 x16, no NVLink. [matmul] 269.15 TFLOPS (0.743:
    # the 350 W cap holds the clock near 1.85 GHz). Bandwidth as measured on the L40, the same
    # GDDR6 board ([stream] l40: 844 of 864 GB/s read).
    "l40s": HardwareSpec(
        name="l40s",
        flops={"fp32": 91.6 * _TF, "bf16": 362.05 * _TF, "fp16": 362.05 * _TF, "fp8": 733 * _TF},
        mem_bandwidth_bytes_s=864 * _GB,
        mem_capacity_bytes=48 * 10**9,
        cuda_memory_bytes=46068 * _MIB,  # [aic] l40s.yaml: 46068 MiB
        host_link_bytes_s=32 * _GB,
        interconnect_bytes_s=32 * _GB,
        num_sms=142,
        sustained_bandwidth_fraction=0.977,
        gemm_efficiency=0.743,
        link="pcie-p2p",
        custom_allreduce_busbw={2: 0.59},  # [aic] vLLM 0.14.0 (links.py)
    ),
    # NVIDIA L40 datasheet: 181.05 TFLOPS dense BF16 (half the L40S: FP32 accumulate at half
    # rate), 362 FP8, 90.5 FP32, 864 GB/s, 142 SMs, PCIe Gen4 x16. [stream] l40: 844 GB/s read.
    "l40": HardwareSpec(
        name="l40",
        flops={"fp32": 90.5 * _TF, "bf16": 181.05 * _TF, "fp16": 181.05 * _TF, "fp8": 362 * _TF},
        mem_bandwidth_bytes_s=864 * _GB,
        mem_capacity_bytes=48 * 10**9,
        host_link_bytes_s=32 * _GB,
        interconnect_bytes_s=32 * _GB,
        num_sms=142,
        sustained_bandwidth_fraction=0.977,
        link="pcie-p2p",
    ),
    # GeForce RTX 4090 (Ada whitepaper, appendix A): 165.2 TFLOPS FP16/BF16 with FP32
    # accumulate (what cuBLAS uses; 330.3 with FP16 accumulate), 330.3 FP8, 82.6 FP32, at the
    # rated 2520 MHz boost; 1008 GB/s GDDR6X, 24 GB, 128 SMs, PCIe Gen4 x16. GeForce cards run
    # above the rated boost: 2730 MHz at 97 % load, stock (GPU-Z, hothardware.com), so the
    # figures here are scaled to 2730 MHz (x 1.083). [matmul] best 173.3 TFLOPS (0.968 of
    # that). clpeak global-memory read 921 GB/s (krrishnarraj/clpeak#106, at a 248 W power
    # limit). A weight-streaming GEMV runs at 950 GB/s (0.942): Llama-3.1-8B's gate/up
    # projection (4096 x 28672 bf16, 234.9 MB) at one token in 247.3 us in vLLM 0.19's
    # operator profile of this card (casys-kaist/LLMServingSim@5daddb2
    # profiler/perf/RTX4090/meta-llama/Llama-3.1-8B/bf16/tp1/dense.csv). The driver disables
    # P2P: all-reduces go through host memory.
    "rtx-4090": HardwareSpec(
        name="rtx-4090",
        flops={"fp32": 89.5 * _TF, "bf16": 179.0 * _TF, "fp16": 179.0 * _TF, "fp8": 357.8 * _TF},
        mem_bandwidth_bytes_s=1008 * _GB,
        mem_capacity_bytes=24 * 10**9,
        # torch's total_memory on an RTX 4090 (LLMServingSim bench/examples/RTX4090 meta.json)
        cuda_memory_bytes=25_250_627_584,
        host_link_bytes_s=32 * _GB,
        interconnect_bytes_s=32 * _GB,
        num_sms=128,
        sustained_bandwidth_fraction=0.914,
        streaming_fraction=0.942,
        gemm_efficiency=0.968,
        link="pcie-host",
    ),
    # RTX PRO 6000 Blackwell Workstation Edition (RTX PRO Blackwell whitepaper v1.0, appendix
    # A; NVIDIA datasheet): 503.8 TFLOPS dense BF16 with FP32 accumulate at 2617 MHz, FP8 twice
    # that, 125 FP32; 96 GB GDDR7, 1792 GB/s, 188 SMs, PCIe Gen5 x16, no NVLink, 600 W.
    # [matmul] 418.0 TFLOPS (0.830: 600 W holds the clock near 2.2 GHz). No published
    # bandwidth measurement: the 0.9 default.
    "rtx-pro-6000": HardwareSpec(
        name="rtx-pro-6000",
        flops={"fp32": 125 * _TF, "bf16": 503.8 * _TF, "fp16": 503.8 * _TF, "fp8": 1007.6 * _TF},
        mem_bandwidth_bytes_s=1792 * _GB,
        mem_capacity_bytes=96 * 10**9,
        host_link_bytes_s=64 * _GB,
        interconnect_bytes_s=64 * _GB,
        num_sms=188,
        gemm_efficiency=0.830,
        link="pcie-p2p",
    ),
    # RTX PRO 6000 Blackwell Server Edition (NVIDIA datasheet, Dec 2025): 96 GB GDDR7 at
    # 1597 GB/s, 120 FP32 TFLOPS, PCIe Gen5 x16, passive. Dense BF16 467.8 TFLOPS and FP8
    # 935.6 at the 2430 MHz its SMs were seen to reach ([aic] rtx_pro_6000_server.yaml).
    # [matmul] 417.3 TFLOPS (0.892). Weight-streaming GEMVs at one token in vLLM 0.19's
    # operator profile of this card (casys-kaist/LLMServingSim@5daddb2
    # profiler/perf/RTXPRO6000/<model>/bf16/tp1/dense.csv, gate_up_proj): Llama-3.1-8B's
    # 234.9 MB in 159.5 us (1473 GB/s) and Qwen3-32B's 524.3 MB in 378.1 us (1387 GB/s): 0.922
    # and 0.868 of 1597, 0.895 taken.
    "rtx-pro-6000-server": HardwareSpec(
        name="rtx-pro-6000-server",
        flops={"fp32": 120 * _TF, "bf16": 467.8 * _TF, "fp16": 467.8 * _TF, "fp8": 935.6 * _TF},
        mem_bandwidth_bytes_s=1597 * _GB,
        mem_capacity_bytes=96 * 10**9,
        cuda_memory_bytes=97887 * _MIB,  # [aic]: "97887 MiB reported by nvidia-smi"
        host_link_bytes_s=64 * _GB,
        interconnect_bytes_s=64 * _GB,
        num_sms=188,
        streaming_fraction=0.895,
        gemm_efficiency=0.892,
        link="pcie-p2p",
        custom_allreduce_busbw={2: 0.21},  # [aic] vLLM 0.19.0 (links.py)
    ),
    # NVIDIA A10G (AWS G5; no public datasheet): GA102 with 80 SMs (torch device properties),
    # 24 GB GDDR6 at 600 GB/s (AWS's figure), PCIe Gen4. Dense BF16 ~70 TFLOPS: 80 SMs x 512
    # FLOP/clock (half-rate FP32 accumulate, as on GA102 GeForce parts) x 1.71 GHz, which
    # [matmul] 69.47 TFLOPS (zzc0721/torch-performance-test-data#126) bears out. P2P between
    # G5 GPUs is not documented: through host memory.
    "a10g": HardwareSpec(
        name="a10g",
        flops={"fp32": 31.2 * _TF, "bf16": 70 * _TF, "fp16": 70 * _TF},
        mem_bandwidth_bytes_s=600 * _GB,
        mem_capacity_bytes=24 * 10**9,
        host_link_bytes_s=32 * _GB,
        interconnect_bytes_s=32 * _GB,
        num_sms=80,
        gemm_efficiency=0.99,
        link="pcie-host",
    ),
    # NVIDIA B200 (HGX, 1000 W; exemplar-performance README, ml-engineering tables): 2250
    # TFLOPS dense BF16, 4500 FP8, 180 GB usable HBM3e at 8.0 TB/s, 148 SMs (Chips and Cheese),
    # NVLink5 900 GB/s per direction. [mamf] 1745 TFLOPS (0.776). No bandwidth measurement.
    "b200": HardwareSpec(
        name="b200",
        flops={"fp32": 80 * _TF, "bf16": 2250 * _TF, "fp16": 2250 * _TF, "fp8": 4500 * _TF},
        mem_bandwidth_bytes_s=8000 * _GB,
        mem_capacity_bytes=180 * 10**9,
        host_link_bytes_s=64 * _GB,
        interconnect_bytes_s=900 * _GB,
        num_sms=148,
        gemm_efficiency=0.776,
        custom_allreduce_busbw={2: 0.17, 4: 0.18, 8: 0.27},  # [aic] b200_sxm vLLM 0.19.0 (links.py)
    ),
    # NVIDIA H20 (Hopper, 96 GB): 148 TFLOPS dense BF16, 296 FP8, 96 GB HBM3 at 4.0 TB/s, 78
    # SMs (torch device properties), NVLink 900 GB/s (450 per direction) ([aic] h20_sxm.yaml).
    # [matmul] 142.3 TFLOPS (0.961).
    "h20": HardwareSpec(
        name="h20",
        flops={"fp32": 44 * _TF, "bf16": 148 * _TF, "fp16": 148 * _TF, "fp8": 296 * _TF},
        mem_bandwidth_bytes_s=4000 * _GB,
        mem_capacity_bytes=96 * 10**9,
        host_link_bytes_s=64 * _GB,
        interconnect_bytes_s=450 * _GB,
        num_sms=78,
        gemm_efficiency=0.961,
    ),
    # NVIDIA GH200 (96 GB HBM3 module; NVIDIA datasheet): 990 TFLOPS dense BF16, 1979 FP8,
    # 4.0 TB/s, 132 SMs, NVLink-C2C 900 GB/s to the Grace CPU (450 per direction: KV swap),
    # NVLink 450 per direction between modules. Read bandwidth 3614.6 GB/s (OpenCL benchmark,
    # mredenti/PowerCapping configuration/OpenCL_benchmark.md). [mamf] 828.6 TFLOPS (0.837,
    # measured on the 144 GB module; the same GPU).
    "gh200": HardwareSpec(
        name="gh200",
        flops={"fp32": 67 * _TF, "bf16": 989.5 * _TF, "fp16": 989.5 * _TF, "fp8": 1979 * _TF},
        mem_bandwidth_bytes_s=4000 * _GB,
        mem_capacity_bytes=96 * 10**9,
        host_link_bytes_s=450 * _GB,
        interconnect_bytes_s=450 * _GB,
        num_sms=132,
        sustained_bandwidth_fraction=0.904,
        gemm_efficiency=0.837,
        link="nvlink",
    ),
    # AMD Instinct MI300X (ml-engineering tables): 1307.4 TFLOPS dense BF16 (2100 MHz x 1216
    # matrix cores), 2614.9 FP8, 163.4 FP32, 192 GB HBM3 at 5.3 TB/s, 304 CUs, PCIe Gen5.
    # BabelStream Dot 3.87 TB/s (Azure ND MI300X v5: 0.730). Best BF16 GEMM 708 TFLOPS (AMD's
    # "Measuring Max-Achievable FLOPs" blog via AMD-AGI/TraceLens: 0.542). xGMI: 7 links of
    # 64 GB/s per direction, all-to-all (448 GB/s; sim.catalog.links "xgmi").
    "mi300x": HardwareSpec(
        name="mi300x",
        flops={
            "fp32": 163.4 * _TF,
            "bf16": 1307.4 * _TF,
            "fp16": 1307.4 * _TF,
            "fp8": 2614.9 * _TF,
        },
        mem_bandwidth_bytes_s=5300 * _GB,
        mem_capacity_bytes=192 * 10**9,
        host_link_bytes_s=64 * _GB,
        interconnect_bytes_s=448 * _GB,
        num_sms=304,
        sustained_bandwidth_fraction=0.730,
        gemm_efficiency=0.542,
        link="xgmi",
    ),
}
