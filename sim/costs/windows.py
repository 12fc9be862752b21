"""What attention costs in a model whose layers keep different KV (``ModelSpec``
``sliding_window`` and ``layer_types``): a sliding-window layer's query attends to at most
the last ``W`` tokens, so a decode reads ``min(context, W)`` tokens of KV and a prefill
q-tile visits at most the KV tiles the window spans (sim/costs/kernels.py), whatever the
sequence's length. Full-attention layers read it all, as in every other model. Each kind
of layer is priced with the analytic model's kernels and weighted by its layer count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from sim.catalog.hardware import ModelSpec
from sim.costs.kernels import GpuKernels


class WindowedAttention(NamedTuple):
    """The attention of all layers of a model with sliding windows on one GPU:
    ``kinds`` are ``(window, layers)``, None for the full-attention layers."""

    kernels: GpuKernels
    heads: int
    head_dim: int
    kv_bytes_per_layer_token: int
    kinds: tuple[tuple[int | None, int], ...]

    @classmethod
    def of(
        cls,
        model: ModelSpec,
        kernels: GpuKernels,
        heads: int,
        head_dim: int,
        kv_bytes_per_layer_token: int,
    ) -> WindowedAttention | None:
        """The windowed attention of ``model``; None if every layer is full attention."""
        kinds = model.attention_kinds()
        if all(window is None for window, _ in kinds):
            return None
        return cls(kernels, heads, head_dim, kv_bytes_per_layer_token, kinds)

    def attention(
        self, chunks: Sequence[tuple[int, int]], num_decodes: int, lens: np.ndarray | None
    ) -> tuple[float, float]:
        """(prefill, decode) seconds of all layers: prefill ``chunks`` as ``(cached,
        new)`` and decodes of context lengths ``lens`` (the new token included)."""
        kernels, per_token = self.kernels, self.kv_bytes_per_layer_token
        lens = np.asarray(lens if lens is not None else (), np.int64)
        prefill = decode = 0.0
        for window, layers in self.kinds:
            if chunks:
                attended = kernels.prefill_attention(chunks, self.heads, self.head_dim, window)
                prefill += layers * attended
            read = lens if window is None else np.minimum(lens, window)
            decode += layers * kernels.decode_attention(num_decodes, int(read.sum()), per_token)
        return prefill, decode

    def decode_steps(self, lens: np.ndarray, contexts: np.ndarray, steps: int) -> np.ndarray:
        """Decode seconds of all layers at each step of a stretch whose contexts start at
        ``lens`` and grow by one a step (``contexts``: their sums, step by step)."""
        kernels, per_token, num = self.kernels, self.kv_bytes_per_layer_token, lens.shape[0]
        grown = lens[None, :] + np.arange(steps, dtype=np.int64)[:, None]
        decode = np.zeros(steps)
        for window, layers in self.kinds:
            read = contexts if window is None else np.minimum(grown, window).sum(axis=1)
            decode = decode + layers * kernels.decode_attentions(num, read, per_token)
        return decode
