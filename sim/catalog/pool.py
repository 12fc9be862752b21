"""The size of the KV pool: how many blocks of KV fit next to the weights (the one place
the pool is sized from memory; ``cache.num_blocks`` overrides it).
"""

from __future__ import annotations

from typing import NamedTuple

from sim.catalog.hardware import HardwareSpec, ModelSpec


class KVPool(NamedTuple):
    """One replica's KV pools in blocks of ``cache.block_size`` tokens, as the scenario
    sized them (``Scenario.kv_pool``)."""

    device_blocks: int
    cpu_blocks: int
    offload_blocks: tuple[int, ...] = ()  # each offload tier's (cache.offload), CPU first


def check_tensor_parallel(
    model: ModelSpec, tensor_parallel: int, expert_parallel: bool | None = None
) -> None:
    """Raises ValueError unless ``tensor_parallel`` splits query heads evenly and KV heads
    evenly or by replication (the rule vLLM enforces), and an MoE model's experts: their
    width, or with ``expert_parallel`` their number (None: the heads only)."""
    tp = tensor_parallel
    if tp < 1:
        raise ValueError(f"tensor_parallel must be >= 1, got {tp}")
    if model.num_heads % tp:
        raise ValueError(
            f"tensor_parallel={tp} must divide num_heads={model.num_heads} of {model.name!r}"
        )
    kv_heads = model.num_kv_heads
    if kv_heads % tp and tp % kv_heads:
        raise ValueError(
            f"tensor_parallel={tp} must divide, or be a multiple of, "
            f"num_kv_heads={kv_heads} of {model.name!r}"
        )
    if model.moe is not None and expert_parallel is not None:
        check_experts_split(model, tp, expert_parallel)


def check_experts_split(model: ModelSpec, tp: int, expert_parallel: bool) -> None:
    """Raises ValueError unless ``tp`` GPUs split an MoE model's experts: their number
    with ``expert_parallel``, their width without."""
    moe = model.moe
    if expert_parallel and moe.num_experts % tp:
        raise ValueError(
            f"expert_parallel over tensor_parallel={tp} GPUs must divide the "
            f"{moe.num_experts} experts of {model.name!r}"
        )
    if not expert_parallel and moe.expert_intermediate_size % tp:
        raise ValueError(
            f"tensor_parallel={tp} must divide the experts' width "
            f"(expert_intermediate_size={moe.expert_intermediate_size}) of {model.name!r}; "
            "or split the experts themselves with expert_parallel: true"
        )


def default_activation_reserve_bytes(
    model: ModelSpec,
    tensor_parallel: int = 1,
    *,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 256,
) -> int:
    """Peak activation memory per GPU of one forward pass at the token budget: one layer's
    live tensors (residual + normed input, q/k/v, MLP up/gate) for every batched token,
    plus fp32 logits for every sequence. vLLM measures this by profiling a dummy step;
    this estimate is within a factor of two of its figure for 7-8B models."""
    tp = tensor_parallel
    qkv = (model.num_heads + 2 * model.num_kv_heads) * model.head_dim // tp
    mlp = (2 if model.mlp == "swiglu" else 1) * model.intermediate_size // tp
    if model.moe is not None:  # the widest of a dense layer and a MoE layer's top-k rows
        moe = model.moe
        routed = moe.experts_per_token * 2 * moe.expert_intermediate_size // tp
        mlp = max(mlp if moe.dense_layers else 0, routed + 2 * moe.shared_intermediate_size // tp)
    per_token = (2 * model.hidden_size + qkv + mlp) * model.dtype_bytes
    logits = max_num_seqs * model.vocab_size * 4
    return max_num_batched_tokens * per_token + logits


def kv_pool_blocks(
    model: ModelSpec,
    hardware: HardwareSpec,
    tensor_parallel: int = 1,
    block_size: int = 16,
    gpu_memory_utilization: float = 0.9,
    activation_reserve_bytes: int | None = None,
    kv_element_bytes: int | None = None,
) -> int:
    """Number of KV blocks of ``block_size`` tokens the TP group can hold.

    Per GPU: ``memory x gpu_memory_utilization - weights / tp - activation reserve``, the
    memory as CUDA reports it where known (``HardwareSpec.cuda_memory_bytes``, as vLLM
    reads it), else the datasheet's,
    divided by one block's per-GPU shard. Every GPU holds its shard of every block, so
    this is also the group's pool size. The reserve defaults to
    :func:`default_activation_reserve_bytes`; the ``1 - gpu_memory_utilization`` headroom
    covers the CUDA context, allocator fragmentation and CUDA graphs.

    Raises ValueError if the arguments are out of range, if the weights and the reserve
    do not fit, or if no whole block is left."""
    check_tensor_parallel(model, tensor_parallel)
    if block_size < 1:
        raise ValueError(f"block_size must be a positive number of tokens, got {block_size}")
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if activation_reserve_bytes is None:
        activation_reserve_bytes = default_activation_reserve_bytes(model, tensor_parallel)
    if activation_reserve_bytes < 0:
        raise ValueError(f"activation_reserve_bytes must be >= 0, got {activation_reserve_bytes}")
    usable = (hardware.cuda_memory_bytes or hardware.mem_capacity_bytes) * gpu_memory_utilization
    weights = model.weight_bytes / tensor_parallel
    free = usable - weights - activation_reserve_bytes
    block_bytes = model.kv_block_bytes(block_size, tensor_parallel, kv_element_bytes)
    if free < block_bytes:
        raise ValueError(
            f"{model.name!r} does not leave room for KV blocks on {tensor_parallel} x "
            f"{hardware.name!r}: {usable / 1e9:.2f} GB usable per GPU, weights "
            f"{weights / 1e9:.2f} GB, activation reserve {activation_reserve_bytes / 1e9:.2f} "
            f"GB, one block {block_bytes / 1e6:.3f} MB; use more GPUs (tensor_parallel), a "
            f"bigger GPU or a higher gpu_memory_utilization"
        )
    return int(free // block_bytes)


def check_given_pool(
    model: ModelSpec,
    hardware: HardwareSpec,
    tensor_parallel: int,
    num_blocks: int,
    block_size: int,
    kv_element_bytes: int | None = None,
) -> tuple[str, str] | None:
    """What is wrong with a pool given as ``num_blocks`` on ``tensor_parallel`` x
    ``hardware``, or None: the weights' shard and the blocks' shards must fit in one GPU's
    whole memory. The bound is physical (no headroom, no activations): a given pool is
    the user's to size, but not past the memory it would live in. Returns
    ``("tensor_parallel" | "cache.num_blocks", message)`` naming what to change."""
    memory = hardware.cuda_memory_bytes or hardware.mem_capacity_bytes
    weights = model.weight_bytes / tensor_parallel
    block_bytes = model.kv_block_bytes(block_size, tensor_parallel, kv_element_bytes)
    needed = weights + num_blocks * block_bytes
    if needed <= memory:
        return None
    field = "tensor_parallel" if weights > memory else "cache.num_blocks"
    return field, (
        f"{num_blocks:,} blocks of {block_bytes / 1e6:.3f} MB and {weights / 1e9:.2f} GB of "
        f"{model.name!r} weights need {needed / 1e9:.2f} GB per GPU; {tensor_parallel} x "
        f"{hardware.name!r} has {memory / 1e9:.2f} GB each: fewer blocks, more GPUs "
        "(tensor_parallel) or a bigger GPU"
    )
