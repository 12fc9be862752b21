"""Model and accelerator specs (pydantic, frozen); the presets are in :mod:`sim.catalog.presets`.

A scenario names a model and a GPU either by preset (``"llama-3-8b"``, ``"h100-sxm"``) or
by an explicit shape; :func:`resolve_model` / :func:`resolve_hardware` accept both, plus a
dict ``{"preset": NAME, ...overrides}``. An unknown preset raises ``ValueError`` listing the
valid names, which pydantic turns into a field error for the scenario file.

Parameter counting (:attr:`ModelSpec.num_params`) covers the token embedding, attention
q/k/v/o, the MLP, the norms' scales and an untied LM head. Biases (OPT everywhere, Qwen2
on q/k/v) and OPT's learned position embeddings are left out: they are < 0.2 % of the
weights and add no matmul FLOPs worth modelling.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_serializer,
    model_validator,
)

from sim.catalog.kv_layout import KVLayout, kv_layout
from sim.catalog.links import LinkKind
from sim.catalog.mla import MLASpec
from sim.catalog.moe import MoESpec
from sim.inputs.schema import StrictModel, drop_unset

DtypeName = Literal["fp32", "tf32", "bf16", "fp16", "fp8"]


class ModelSpec(StrictModel):
    """The shape of a decoder-only transformer, enough to count bytes and FLOPs."""

    name: str = "custom"
    """A label: the preset's name, or ``custom``. The profile cost model maps preset names to
    Vidur's."""
    num_layers: PositiveInt
    """Decoder layers."""
    hidden_size: PositiveInt
    """Width of the residual stream (the embedding size)."""
    num_heads: PositiveInt
    """Query heads per layer."""
    num_kv_heads: PositiveInt
    """KV heads per layer, fewer than ``num_heads`` with grouped-query attention (``num_heads`` must
    be a multiple). With ``num_layers``, ``head_dim`` and ``dtype_bytes`` it sets the KV bytes
    per token."""
    head_dim: PositiveInt
    """Dimension of one attention head."""
    intermediate_size: PositiveInt
    """Hidden width of the MLP."""
    vocab_size: PositiveInt
    """Vocabulary size: rows of the token embedding and of the LM head."""
    max_model_len: PositiveInt
    """Context window in tokens, prompt plus output; generated requests are clipped to it, a request
    that cannot fit is rejected."""
    dtype_bytes: Literal[1, 2, 4] = 2
    """Bytes per weight and KV element: 2 (bf16, fp16), 1 (fp8) or 4 (fp32)."""
    mlp: Literal["swiglu", "gelu"] = "swiglu"
    """``swiglu``: gate, up and down projections (Llama, Mistral, Qwen); ``gelu``: up and down only
    (OPT, GPT-2)."""
    tie_embeddings: bool = False
    """The LM head reuses the token-embedding matrix (its weights are counted once)."""
    config: str | None = None
    """A HuggingFace ``config.json`` to read the shape from (no hub access: a local file, relative
    to the scenario file); the other fields given beside it replace what it says (e.g.
    ``max_model_len``, ``dtype_bytes``). scenario.json keeps the path as written beside the shape
    read. Null: a preset or a shape given field by field."""
    rope_theta: float | None = Field(default=None, gt=0)
    """RoPE base frequency, as a config.json gives it. Carried for the record: step times and KV
    sizes do not depend on it."""
    rope_scaling: dict[str, Any] | None = None
    """RoPE scaling (``type``/``rope_type``, ``factor``, ...) as a config.json gives it, for the
    record; ``max_model_len`` is the context the run allows."""
    sliding_window: PositiveInt | Literal["off", False] | None = None
    """Sliding-window attention span in tokens, as a config.json gives it (null: full attention, or
    a window the config switches off). The layers ``layer_types`` names ``sliding_attention`` (all
    of them without ``layer_types``: Mistral-7B-v0.1) keep only the KV of the last
    ``sliding_window`` tokens, in KV cache groups of their own (sim.catalog.kv_layout), and read
    at most that many. ``off`` (YAML reads a bare off as false: the same): count and price every
    layer as full attention, to compare."""
    layer_types: tuple[Literal["full_attention", "sliding_attention"], ...] | None = None
    """Each layer's attention, as a config.json's ``layer_types`` gives it (gpt-oss, Gemma 3):
    ``full_attention`` or ``sliding_attention``, one entry per layer. Null: every layer is a
    window of ``sliding_window`` tokens if that is set, else full attention."""
    moe: MoESpec | None = None
    """Mixture-of-experts layers (sim.catalog.moe): routed experts, top-k, expert width, shared
    experts and the layers that stay dense; read from a Mixtral, Qwen2-MoE or Qwen3-MoE
    config.json. Null: a dense model (every layer's MLP is ``intermediate_size`` wide)."""
    mla: MLASpec | None = None
    """Multi-head latent attention (sim.catalog.mla, DeepSeek-V2/V3): one latent of
    ``kv_lora_rank + qk_rope_head_dim`` elements cached per token and layer, on every GPU of a
    tensor-parallel group, instead of K and V per KV head. Null: K and V per head."""

    @field_validator("sliding_window", mode="before")
    @classmethod
    def _window_or_off(cls, value: Any) -> Any:
        # YAML 1.1 (PyYAML, as every scenario file is read) takes a bare ``off`` for the
        # boolean false: the documented switch, as a user writes it.
        if value is False:
            return "off"
        positive = isinstance(value, int) and not isinstance(value, bool) and value > 0
        if not (value is None or value == "off" or positive):
            raise ValueError(
                f"expected a window in tokens (an int > 0), off, or null; got {value!r}"
            )
        return value

    @model_serializer(mode="wrap")
    def _leave_out_unset_extras(self, handler) -> dict[str, Any]:
        return drop_unset(handler(self), _EXTRAS)

    @model_validator(mode="after")
    def _one_attention_type_per_layer(self) -> ModelSpec:
        types = self.layer_types
        if types is not None and len(types) != self.num_layers:
            raise ValueError(
                f"layer_types has {len(types)} entries; num_layers is {self.num_layers}: "
                "one attention type per layer"
            )
        if types is not None and "sliding_attention" in types and self.sliding_window is None:
            raise ValueError("layer_types names sliding_attention layers: set sliding_window")
        return self

    def attention_kinds(self) -> tuple[tuple[int | None, int], ...]:
        """``(window in tokens or None for full attention, layers)`` of each kind of layer
        the KV cache keeps, in the order of each kind's first layer (counted, never a
        list a layer: a config may claim billions of layers)."""
        window = self.sliding_window
        if window is None or window == "off":
            return ((None, self.num_layers),)
        if self.layer_types is None:
            return ((window, self.num_layers),)
        counts: dict[int | None, int] = {}
        for kind in self.layer_types:
            key = window if kind == "sliding_attention" else None
            counts[key] = counts.get(key, 0) + 1
        return tuple(counts.items())

    @property
    def kv_layout(self) -> KVLayout:
        """The model's KV cache groups (sim.catalog.kv_layout)."""
        return kv_layout(self.attention_kinds())

    def kv_block_bytes(
        self, block_size: int, tensor_parallel: int = 1, element_bytes: int | None = None
    ) -> int:
        """Bytes of one KV block on each GPU: ``block_size`` tokens of the layers of one KV
        cache group (all layers for most models; see ``kv_bytes_per_token``)."""
        per_layer = self.kv_bytes_per_token(tensor_parallel, element_bytes) // self.num_layers
        return block_size * self.kv_layout.layers_per_group * per_layer

    @model_validator(mode="after")
    def _kv_heads_divide_heads(self) -> ModelSpec:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        return self

    @model_validator(mode="after")
    def _some_layer_has_experts(self) -> ModelSpec:
        if self.moe is not None and self.moe.dense_layers >= self.num_layers:
            raise ValueError(
                f"moe.dense_layers ({self.moe.dense_layers}) must be fewer than num_layers "
                f"({self.num_layers}): a model without MoE layers has no moe section"
            )
        return self

    def kv_bytes_per_token(self, tensor_parallel: int = 1, element_bytes: int | None = None) -> int:
        """KV bytes one token occupies on each GPU of a ``tensor_parallel`` group: K and V
        for every layer and KV head, the KV heads sharded over the group (and replicated
        once it is wider than them), ``element_bytes`` an element (None: the model's
        dtype; ``cache.kv_dtype`` sets it)."""
        element = self.dtype_bytes if element_bytes is None else element_bytes
        if self.mla is not None:  # one latent a token, whole on every GPU
            return self.num_layers * self.mla.cached_elements * element
        kv_heads_per_gpu = max(1, self.num_kv_heads // tensor_parallel)
        return 2 * self.num_layers * kv_heads_per_gpu * self.head_dim * element

    @property
    def attention_params_per_layer(self) -> int:
        if self.mla is not None:
            return self.mla.attention_params(self.hidden_size, self.num_heads)
        q_out = self.num_heads * self.head_dim
        kv_out = self.num_kv_heads * self.head_dim
        # q, k, v project hidden -> heads; o projects q_out -> hidden
        return self.hidden_size * (q_out + 2 * kv_out) + q_out * self.hidden_size

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices of one (dense or expert) MLP: gate, up, down; or up, down."""
        return 3 if self.mlp == "swiglu" else 2

    @property
    def mlp_params_per_layer(self) -> int:
        """A dense layer's MLP weights."""
        return self.mlp_matrices * self.hidden_size * self.intermediate_size

    @property
    def dense_mlp_layers(self) -> int:
        """Layers with a dense MLP (all of them in a dense model)."""
        return self.num_layers if self.moe is None else self.moe.dense_layers

    @property
    def layer_linear_params(self) -> int:
        """Matmul weights of all decoder layers (attention + MLP, every expert and the
        routers), no LM head."""
        mlp = self.dense_mlp_layers * self.mlp_params_per_layer
        if self.moe is not None:
            moe_layers = self.moe.moe_layers(self.num_layers)
            mlp += moe_layers * self.moe.layer_params(self.hidden_size, self.mlp_matrices)
        return self.num_layers * self.attention_params_per_layer + mlp

    @property
    def active_layer_linear_params(self) -> int:
        """Matmul weights one token multiplies in all decoder layers: the routed top-k,
        not every expert (:attr:`layer_linear_params` for a dense model)."""
        if self.moe is None:
            return self.layer_linear_params
        moe_layers = self.moe.moe_layers(self.num_layers)
        active = self.moe.active_layer_params(self.hidden_size, self.mlp_matrices)
        dense = self.dense_mlp_layers * self.mlp_params_per_layer
        return self.num_layers * self.attention_params_per_layer + dense + moe_layers * active

    @property
    def lm_head_params(self) -> int:
        """The output projection's weights (the embedding matrix itself when tied)."""
        return self.vocab_size * self.hidden_size

    @property
    def num_params(self) -> int:
        embedding = self.vocab_size * self.hidden_size
        norms = (2 * self.num_layers + 1) * self.hidden_size  # two per layer + final
        lm_head = 0 if self.tie_embeddings else self.lm_head_params
        return embedding + self.layer_linear_params + norms + lm_head

    @property
    def active_params(self) -> int:
        """:attr:`num_params` less the experts a token skips (all of them: dense)."""
        return self.num_params - self.layer_linear_params + self.active_layer_linear_params

    @property
    def weight_bytes(self) -> int:
        """Bytes of the weights as served: the model's dtype, the routed experts at the
        size their checkpoint stores them (``moe.expert_weight_bits``) where given."""
        moe = self.moe
        if moe is None or moe.expert_weight_bits is None:
            return self.num_params * self.dtype_bytes
        routed = moe.moe_layers(self.num_layers) * moe.routed_params(
            self.hidden_size, self.mlp_matrices
        )
        rest = (self.num_params - routed) * self.dtype_bytes
        return rest + math.ceil(routed * moe.expert_weight_bits / 8)

    @property
    def linear_flops_per_token(self) -> int:
        """2 FLOPs (multiply + add) per matmul weight a token multiplies (the active
        experts only), LM head included."""
        return 2 * (self.active_layer_linear_params + self.lm_head_params)


#: ModelSpec fields a dump leaves out while they are null (what only a config.json gives).
_EXTRAS = dict.fromkeys(
    ("config", "rope_theta", "rope_scaling", "sliding_window", "layer_types", "moe", "mla")
)

#: HardwareSpec fields a dump leaves out while they are null (measured on some cards only).
_HARDWARE_EXTRAS = dict.fromkeys(
    (
        "cuda_memory_bytes",
        "streaming_fraction",
        "gemm_efficiency",
        "attention_efficiency",
        "custom_allreduce_busbw",
        "link",
    )
)


class HardwareSpec(StrictModel):
    """One accelerator's datasheet figures (dense, no sparsity), plus two measured ones
    the cost model needs: how many SMs share the work and what fraction of the datasheet
    bandwidth a streaming kernel sustains."""

    name: str = "custom"
    """A label: the preset's name, or ``custom``. The profile cost model maps preset names to
    Vidur's."""
    flops: dict[DtypeName, PositiveFloat]
    """Dense peak FLOP/s (no sparsity) per dtype: ``fp32``, ``tf32``, ``bf16``, ``fp16``, ``fp8``;
    at least one. Matmuls run at the rate of the model's ``dtype_bytes``."""
    mem_bandwidth_bytes_s: PositiveFloat
    """Datasheet memory (HBM) bandwidth, bytes per second."""
    mem_capacity_bytes: PositiveInt
    """Device memory in bytes (the datasheet's decimal GB)."""
    cuda_memory_bytes: PositiveInt | None = None
    """Device memory as CUDA reports it (``cudaMemGetInfo``'s total, nvidia-smi's MiB), a few
    percent above the datasheet's decimal GB: what vLLM sizes its KV pool from (x
    ``gpu_memory_utilization``). Null: ``mem_capacity_bytes``."""
    host_link_bytes_s: PositiveFloat
    """Host to device bandwidth, one direction, bytes per second (PCIe or NVLink-C2C); prices KV
    swap."""
    interconnect_bytes_s: PositiveFloat
    """GPU to GPU bandwidth per GPU, one direction, bytes per second (NVLink; PCIe if none); prices
    tensor-parallel all-reduces."""
    num_sms: PositiveInt | None = None
    """Streaming multiprocessors, for the tile and wave quantisation of GEMMs and attention; null:
    not modelled."""
    sustained_bandwidth_fraction: float = Field(default=0.9, gt=0.0, le=1.0)
    """Sustained over datasheet bandwidth of a read-bound streaming kernel, in (0, 1]: 0.86 to 0.98
    measured on A100, H100, H200 and A40; 0.9 where nobody has measured."""
    streaming_fraction: float | None = Field(default=None, gt=0.0, le=1.0)
    """Measured bandwidth of a weight-streaming GEMV (a large linear layer at one token) over the
    datasheet bandwidth, in (0, 1], where this card has been measured; null:
    ``sustained_bandwidth_fraction`` x ``cost_model.params.memory_efficiency`` (which, set,
    wins)."""
    gemm_efficiency: float | None = Field(default=None, gt=0.0, le=1.0)
    """Measured best dense GEMM throughput over ``flops`` (cuBLAS at its best shape, in (0, 1]),
    where this card has been measured; null: ``cost_model.params.gemm_efficiency``. A set
    ``cost_model.params.gemm_efficiency`` wins over it."""
    attention_efficiency: float | None = Field(default=None, gt=0.0, le=1.0)
    """Measured FlashAttention main-loop throughput over ``flops``, where this card has been
    measured; null: ``cost_model.params.attention_efficiency`` (which, set, wins)."""
    custom_allreduce_busbw: dict[PositiveInt, Annotated[float, Field(gt=0.0, le=1.0)]] | None = None
    """Measured bus bandwidth of vLLM's custom all-reduce inside a CUDA graph over the link's
    one-direction bandwidth, at decode-sized messages (0.5-4 MiB: a step's hidden states), by
    tensor-parallel GPU count, where this card has been measured (sim.catalog.links); null: the
    link's nccl-tests fraction for every size. A set ``cost_model.params.interconnect_efficiency``
    wins over it."""
    link: LinkKind | None = None
    """What connects the GPUs of a tensor-parallel group (sim.catalog.links): ``nvlink``,
    ``pcie-p2p`` (PCIe with peer-to-peer), ``pcie-host`` (PCIe through host memory: GeForce
    cards), ``xgmi`` (AMD Infinity Fabric) or ``network`` (GPUs in different nodes). Null:
    ``nvlink`` when ``interconnect_bytes_s`` is above ``host_link_bytes_s``, else
    ``pcie-p2p``."""

    @model_serializer(mode="wrap")
    def _leave_out_unset_figures(self, handler) -> dict[str, Any]:
        return drop_unset(handler(self), _HARDWARE_EXTRAS)  # measured on some cards only

    @property
    def link_kind(self) -> LinkKind:
        """:attr:`link`, or the kind its bandwidths imply."""
        if self.link is not None:
            return self.link
        return "nvlink" if self.interconnect_bytes_s > self.host_link_bytes_s else "pcie-p2p"

    @property
    def sustained_bandwidth_bytes_s(self) -> float:
        return self.mem_bandwidth_bytes_s * self.sustained_bandwidth_fraction

    @model_validator(mode="after")
    def _has_a_float_format(self) -> HardwareSpec:
        if not self.flops:
            raise ValueError("flops must name at least one dtype, e.g. {'bf16': 1e15}")
        return self

    def peak_flops(self, dtype_bytes: int) -> float:
        """Dense peak FLOP/s for matmuls on elements of ``dtype_bytes`` bytes.

        4 -> fp32; 2 -> bf16, else fp16; 1 -> fp8, else the 2-byte rate (the hardware
        would upcast). Raises ValueError if the device lists no matching format."""
        order: dict[int, tuple[DtypeName, ...]] = {
            4: ("fp32",),
            2: ("bf16", "fp16"),
            1: ("fp8", "bf16", "fp16"),
        }
        if dtype_bytes not in order:
            raise ValueError(f"dtype_bytes must be 1, 2 or 4, got {dtype_bytes}")
        for key in order[dtype_bytes]:
            if key in self.flops:
                return self.flops[key]
        raise ValueError(
            f"hardware {self.name!r} lists no FLOP/s for {dtype_bytes}-byte elements "
            f"(tried {', '.join(order[dtype_bytes])}; has {', '.join(self.flops)})"
        )
