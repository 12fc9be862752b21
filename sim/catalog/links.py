"""How the GPUs of a tensor-parallel group are connected, and what an all-reduce costs
over each kind of link, from published nccl-tests and vLLM all-reduce measurements.

An all-reduce of ``S`` bytes over ``n`` GPUs takes ``latency(n) + 2 (n - 1) / n x S /
busbw(n)``: nccl-tests defines its bus bandwidth so that this holds for a ring, and the
measured busbw of each kind of link is a fraction of that link's one-direction bandwidth
(NVLink: ``HardwareSpec.interconnect_bytes_s``; PCIe: ``host_link_bytes_s``; across nodes:
one 400 Gb/s NIC per GPU). Latency and fraction are given at 2 and 8 GPUs and
interpolated linearly in ``n`` between them (held beyond).

* ``nvlink``: NVLink/NVSwitch. vLLM's custom all-reduce inside a CUDA graph: 4.2, 4.6,
  4.6 us for 2 KiB on 2, 4, 8 H100 SXM and 4.9 to 5.6 us on A100 SXM (NVIDIA
  ai-dynamo/aiconfigurator, systems/data/{h100_sxm,a100_sxm}/comm/vllm, custom all-reduce
  perf). nccl-tests ring busbw 318 of 450 GB/s on 2 H100 and 368 on 8
  (aiconfigurator h100_sxm comm/nccl 2.29.2; togethercomputer/together-nccl-tests H100
  all_reduce_ring.out), 193 of 300 on 2 A100 and 232 on 8 (aiconfigurator; Azure
  AI-benchmarking-guide ND A100 v4).
* ``pcie-p2p``: PCIe with peer-to-peer (datacenter and workstation cards). Two GPUs keep
  vLLM's custom all-reduce (4.2 us on 2 RTX PRO 6000 Server, 5.3 us on 2 L40S, 2 KiB);
  more than two PCIe-only GPUs fall back to NCCL (vLLM custom_all_reduce.py: "not
  supported on more than two PCIe-only GPUs"), 24.6 us at 512 B on 8 RTX PRO 6000
  Server. busbw 20.1 of 32 GB/s on 2 L40S (PCIe 4) and 38.6 of 64 on 2 RTX PRO 6000
  Server (PCIe 5), 24.7 of 64 on 8 (aiconfigurator l40s and rtx_pro_6000_server
  comm/nccl).
* ``pcie-host``: PCIe without peer-to-peer (GeForce cards, whose driver disables it):
  vLLM's P2P check fails, NCCL stages through host memory. 8 RTX 4090 on the stock
  driver: busbw 15.0 GB/s of 32, 38.8 us for 8 B (nccl-tests output in
  tinygrad/open-gpu-kernel-modules' README); 2 RTX 4090: 9.0 us.
* ``xgmi``: AMD Instinct's Infinity Fabric mesh, one 64 GB/s link per pair of GPUs
  (``interconnect_bytes_s`` is all seven, 448 GB/s): RCCL all-reduce busbw 47.7 GB/s on 2
  MI300X (one link) and 316.8 on 8 (Azure ND MI300X v5; ml-engineering network tables);
  the ~45 us small-message latency is read off RCCL's 1 KiB bus bandwidth (an estimate).
* ``network``: GPUs in different nodes, one 400 Gb/s NIC each: 42.6 of 50 GB/s
  point-to-point over NDR InfiniBand (together-nccl-tests B200 collective scaling
  report), ~46-48 us for small all-reduces over 2 nodes (NVIDIA/nccl#1244, 2 x 8 H20).

Below :data:`CUSTOM_KERNEL_MAX_BYTES` vLLM's custom kernel reaches less than nccl-tests'
large-message bus bandwidth, and how much less depends on the card: NVIDIA measured it
inside a CUDA graph (aiconfigurator@095f58a, systems/data/<gpu>/comm/vllm/<version>/
custom_allreduce_perf) and :attr:`HardwareSpec.custom_allreduce_busbw` holds the median
over 0.5-4 MiB where a card was measured: H100 SXM 0.58 / 0.46 / 0.42 of 450 GB/s on 2 /
4 / 8 GPUs (vLLM 0.14.0), H200 0.58 / 0.50 / 0.21, A100 SXM 0.64 / 0.45 / 0.47, B200 0.17
/ 0.18 / 0.27 of 900 (0.19.0), L40S 0.59 of 32 on 2, and RTX PRO 6000 Server 0.21 of 64
on 2 (0.19.0: ~13 GB/s, where nccl-tests reaches 38.6). Between the measured GPU counts
the fraction is interpolated linearly.

Outside CUDA graphs (vLLM captures steps of up to 512 tokens) vLLM's all-reduce has an
eager floor of ~20 us on H100 and H200 and ~44 us on A100 (aiconfigurator, eager mode):
:data:`EAGER_LATENCY_S` is added to the latency of a larger step's all-reduces that the
custom kernel takes (:func:`custom_kernel_runs`: its links, two GPUs on PCIe, messages
below its 8 MiB limit); NCCL takes the rest, at its own latency.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from backend.transfer import (
    CPU,
    DEVICE_COPY,
    DISK,
    REMOTE,
    SWAP_IN,
    SWAP_OUT,
    MovedBlocks,
    Route,
)

LinkKind = Literal["nvlink", "pcie-p2p", "pcie-host", "xgmi", "network"]

#: One 400 Gb/s NIC per GPU, one direction, bytes per second (NDR InfiniBand, RoCE).
NIC_BYTES_S = 50e9

#: Extra latency, seconds, of an all-reduce outside a CUDA graph with vLLM's custom
#: kernel (its eager floor, ~20 us on H100/H200, less the ~5 us in a graph).
EAGER_LATENCY_S = 15e-6

#: Steps of more tokens than this run outside CUDA graphs (vLLM's default largest
#: captured batch, compilation_config max_capture_size 512).
CUDA_GRAPH_MAX_TOKENS = 512


#: vLLM's custom all-reduce takes messages below this many bytes (custom_all_reduce.py
#: ``max_size=8192 * 1024``); larger ones go to NCCL.
CUSTOM_KERNEL_MAX_BYTES = 8 * 1024 * 1024


class LinkModel(NamedTuple):
    """One kind of link: latency (seconds) and busbw fraction at 2 and 8 GPUs, which
    bandwidth it is a fraction of, and whether vLLM's custom all-reduce runs on it."""

    latency_2_s: float
    latency_8_s: float
    busbw_fraction_2: float
    busbw_fraction_8: float
    bandwidth: Literal["interconnect", "host", "nic"]
    custom_kernel: bool


LINKS: dict[str, LinkModel] = {
    "nvlink": LinkModel(4.5e-6, 5e-6, 0.68, 0.79, "interconnect", True),
    "pcie-p2p": LinkModel(5e-6, 24.6e-6, 0.61, 0.39, "host", True),
    "pcie-host": LinkModel(9e-6, 38.8e-6, 0.47, 0.47, "host", False),
    "xgmi": LinkModel(45e-6, 45e-6, 0.106, 0.707, "interconnect", False),
    "network": LinkModel(47e-6, 47e-6, 0.85, 0.85, "nic", False),
}


def _between(at_2: float, at_8: float, gpus: int) -> float:
    share = min(max((gpus - 2) / 6, 0.0), 1.0)
    return at_2 + (at_8 - at_2) * share


def link_latency_s(kind: str, gpus: int) -> float:
    """Latency of one small all-reduce over ``gpus`` GPUs on a ``kind`` link."""
    model = LINKS[kind]
    return _between(model.latency_2_s, model.latency_8_s, gpus)


def busbw_fraction(kind: str, gpus: int) -> float:
    """Measured bus bandwidth over the link's one-direction bandwidth, at ``gpus``."""
    model = LINKS[kind]
    return _between(model.busbw_fraction_2, model.busbw_fraction_8, gpus)


def link_bytes_s(kind: str, interconnect_bytes_s: float, host_link_bytes_s: float) -> float:
    """The one-direction bandwidth a ``kind`` link's busbw is a fraction of."""
    source = LINKS[kind].bandwidth
    if source == "interconnect":
        return interconnect_bytes_s
    return host_link_bytes_s if source == "host" else NIC_BYTES_S


def custom_kernel_runs(kind: str, gpus: int, nbytes: float) -> bool:
    """Whether vLLM's custom all-reduce takes ``nbytes`` over ``gpus`` GPUs on a ``kind``
    link: a link it runs on (on PCIe, two GPUs only) and a message below its limit."""
    if not LINKS[kind].custom_kernel or (kind == "pcie-p2p" and gpus > 2):
        return False
    return nbytes < CUSTOM_KERNEL_MAX_BYTES


def measured_at(by_gpus: dict[int, float], gpus: int) -> float:
    """A figure measured at some GPU counts, at ``gpus``: linear between the nearest
    measured counts, the nearest one outside them."""
    counts = sorted(by_gpus)
    below = [n for n in counts if n <= gpus]
    above = [n for n in counts if n >= gpus]
    if not below or not above:
        return by_gpus[counts[0] if not below else counts[-1]]
    low, high = below[-1], above[0]
    if low == high:
        return by_gpus[low]
    share = (gpus - low) / (high - low)
    return by_gpus[low] + (by_gpus[high] - by_gpus[low]) * share


#: One datacenter NVMe SSD per replica, PCIe 4.0 x4: 6.9 GB/s sequential read, the
#: figure Samsung's PM9A3 datasheet gives (U.2, 3.84-7.68 TB; Micron's 7450 PRO lists
#: 6.8). A disk tier's blocks are whole KV blocks (MiBs), read as large sequential I/O.
NVME_READ_BYTES_S = 6.9e9
#: Latency of a disk tier's read batch: an order-of-magnitude estimate for one NVMe
#: read through the file system (~100 us), not a datasheet figure.
NVME_READ_LATENCY_S = 100e-6

#: What a block transfer's route crosses: a swap or an offload tier's load or store the
#: host link once, a device copy the GPU's own memory (read, then write), a disk tier's
#: promotion into the CPU tier the replica's NVMe read bandwidth, a remote tier's the
#: network: each GPU's rank reads its share over its own NIC, at the "network" link's
#: measured point-to-point fraction and latency (the all-reduce model's, above).
HOST_LINK, DEVICE_MEMORY, DISK_READ = "host link", "device memory", "disk read"
NETWORK_READ = "network read"
ROUTE_LINKS: dict[Route, str] = {
    SWAP_OUT: HOST_LINK,
    SWAP_IN: HOST_LINK,
    DEVICE_COPY: DEVICE_MEMORY,
    (DISK, CPU): DISK_READ,
    (REMOTE, CPU): NETWORK_READ,
}
#: Latency (s) of the step's read from each storage link that has one.
READ_LATENCY_S = {DISK_READ: NVME_READ_LATENCY_S, NETWORK_READ: LINKS["network"].latency_2_s}


def peer_link(kind: str, interconnect_bytes_s: float, host_link_bytes_s: float):
    """One GPU's bandwidth (bytes/s, one direction) and latency (s) for KV read by a
    decode instance from a prefill instance over a ``kind`` link (``nvlink``,
    ``network``, ``pcie-host``): the link's measured point-to-point share of its
    one-direction bandwidth at two GPUs, as for the all-reduces above (nccl-tests:
    NVLink 318 of 450 GB/s on H100; one 400 Gb/s NIC 42.6 of 50 GB/s; PCIe through host
    memory 15.0 of 32 GB/s), and that link's small-message latency. Every GPU of an
    instance moves its own share of the KV (its heads) over its own link."""
    bandwidth = link_bytes_s(kind, interconnect_bytes_s, host_link_bytes_s)
    return bandwidth * busbw_fraction(kind, 2), link_latency_s(kind, 2)


def blocks_per_link(moved: MovedBlocks) -> dict[str, int]:
    """The blocks ``moved`` puts on each link, host link first. Raises ValueError naming
    a route no link here carries."""
    blocks = {HOST_LINK: 0, DEVICE_MEMORY: 0, DISK_READ: 0, NETWORK_READ: 0}
    for route, count in moved.items():
        link = ROUTE_LINKS.get(route)
        if link is None:
            src, dst = route
            raise ValueError(
                f"no link prices moves from {src.value} to {dst.value} (links: {', '.join(blocks)})"
            )
        blocks[link] += count
    return blocks
