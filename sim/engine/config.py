"""The scheduler knobs of one replica."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineConfig:
    """The scheduler knobs of one replica (validated by the scenario schema)."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = True
    watermark_blocks: int = 0  # blocks kept free when admitting new requests
    preemption_mode: str = "recompute"  # or "swap"
    max_model_len: int = 8192
    #: "whole-prompt": a request is admitted only if its whole prompt's KV fits now;
    #: "first-chunk": only its first chunk must fit, later chunks take blocks as they run
    admission: str = "whole-prompt"
