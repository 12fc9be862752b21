"""A small Llama-style decoder with random weights: RMSNorm, rotary embeddings,
grouped-query attention, SwiGLU MLP, greedy decoding. Nothing is ever downloaded.

The model does not own a KV cache: each forward pass hands every layer's rotated
query/key/value to an ``attend`` callback, which stores K/V wherever its caller keeps
them (paged pool, dense per-sequence tensors) and returns the attention output. That is
what lets the paged executor and the contiguous baseline run the very same weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch

from backend.real.shape import ModelShape

#: attend(layer, query [T, heads, dim], key [T, kv_heads, dim], value) -> [T, heads, dim]
AttendFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

ROPE_THETA = 500_000.0  # llama-3's rotary base
RMS_EPS = 1e-5


class LayerWeights(NamedTuple):
    attn_norm: torch.Tensor
    wq: torch.Tensor  # [hidden, heads * dim]
    wk: torch.Tensor  # [hidden, kv_heads * dim]
    wv: torch.Tensor
    wo: torch.Tensor  # [heads * dim, hidden]
    mlp_norm: torch.Tensor
    w_gate: torch.Tensor  # [hidden, intermediate]
    w_up: torch.Tensor
    w_down: torch.Tensor  # [intermediate, hidden]


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    # Normalise in at least float32: bf16 sums of squares lose too much.
    acc = x.to(torch.promote_types(x.dtype, torch.float32))
    normed = acc * torch.rsqrt(acc.pow(2).mean(-1, keepdim=True) + RMS_EPS)
    return normed.to(x.dtype) * weight


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half rotary embedding of ``x`` ``[T, heads, dim]`` at the positions that
    produced ``cos``/``sin`` ``[T, dim // 2]``."""
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    cos, sin = cos[:, None, :], sin[:, None, :]
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)


class LlamaModel:
    """Random-weight Llama-style decoder of a given shape.

    Weights are a pure function of (shape, seed, device, dtype): they are drawn in
    float32 from a generator seeded with ``seed`` on ``device``, then cast, so float32
    and float64 models with the same seed on the same device agree up to rounding.
    """

    def __init__(
        self,
        shape: ModelShape,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        seed: int = 0,
    ):
        self.shape = shape
        self.device = torch.device(device)
        self.dtype = dtype
        self.scale = 1.0 / math.sqrt(shape.head_dim)
        gen = torch.Generator(device=self.device).manual_seed(seed)
        s = shape
        q_width, kv_width = s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim
        self.embed = self._normal(gen, (s.vocab_size, s.hidden_size), 1)
        self.layers = [
            LayerWeights(
                attn_norm=self._ones(s.hidden_size),
                wq=self._normal(gen, (s.hidden_size, q_width), s.hidden_size),
                wk=self._normal(gen, (s.hidden_size, kv_width), s.hidden_size),
                wv=self._normal(gen, (s.hidden_size, kv_width), s.hidden_size),
                wo=self._normal(gen, (q_width, s.hidden_size), q_width),
                mlp_norm=self._ones(s.hidden_size),
                w_gate=self._normal(gen, (s.hidden_size, s.intermediate_size), s.hidden_size),
                w_up=self._normal(gen, (s.hidden_size, s.intermediate_size), s.hidden_size),
                w_down=self._normal(gen, (s.intermediate_size, s.hidden_size), s.intermediate_size),
            )
            for _ in range(s.num_layers)
        ]
        self.final_norm = self._ones(s.hidden_size)
        self.lm_head = self._normal(gen, (s.hidden_size, s.vocab_size), s.hidden_size)
        half = s.head_dim // 2
        exponents = torch.arange(half, dtype=torch.float64) / half
        self._inv_freq = (1.0 / ROPE_THETA**exponents).to(self.device)

    def _normal(self, gen: torch.Generator, dims: tuple[int, int], fan_in: int) -> torch.Tensor:
        w = torch.randn(dims, generator=gen, device=self.device, dtype=torch.float32)
        return (w / math.sqrt(fan_in)).to(self.dtype)

    def _ones(self, size: int) -> torch.Tensor:
        return torch.ones(size, device=self.device, dtype=self.dtype)

    def rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin tables ``[T, head_dim // 2]`` for token positions, in the model dtype
        (angles computed in float64 so long positions stay exact)."""
        angles = positions.to(torch.float64)[:, None] * self._inv_freq[None, :]
        return angles.cos().to(self.dtype), angles.sin().to(self.dtype)

    def forward(
        self, token_ids: torch.Tensor, positions: torch.Tensor, attend: AttendFn
    ) -> torch.Tensor:
        """Final hidden states ``[T, hidden]`` for tokens at ``positions``. ``attend``
        stores K/V and computes attention (see the module docstring)."""
        s = self.shape
        tokens = token_ids.shape[0]
        x = self.embed[token_ids.long()]
        cos, sin = self.rotary(positions)
        for index, layer in enumerate(self.layers):
            h = rms_norm(x, layer.attn_norm)
            q = apply_rotary((h @ layer.wq).view(tokens, s.num_heads, s.head_dim), cos, sin)
            k = apply_rotary((h @ layer.wk).view(tokens, s.num_kv_heads, s.head_dim), cos, sin)
            v = (h @ layer.wv).view(tokens, s.num_kv_heads, s.head_dim)
            attended = attend(index, q, k, v)
            x = x + attended.reshape(tokens, -1) @ layer.wo
            h = rms_norm(x, layer.mlp_norm)
            x = x + (torch.nn.functional.silu(h @ layer.w_gate) * (h @ layer.w_up)) @ layer.w_down
        return rms_norm(x, self.final_norm)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits for final hidden states, in at least float32."""
        return (hidden @ self.lm_head).to(torch.promote_types(self.dtype, torch.float32))
