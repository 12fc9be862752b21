"""The model shape the real backend needs, free of the simulator's schema."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class ModelShape:
    """Dimensions of a Llama-style decoder. Field names match the simulator's ModelSpec."""

    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_model_len: int

    def __post_init__(self) -> None:
        for f in fields(self):
            if int(getattr(self, f.name)) <= 0:
                raise ValueError(f"ModelShape.{f.name} must be positive")
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads (grouped-query)")
        if self.head_dim % 2:
            raise ValueError("head_dim must be even (rotary embeddings rotate pairs)")

    @classmethod
    def from_spec(cls, spec: Any) -> ModelShape:
        """Build from any object with these attributes (extras such as ``name`` or
        ``dtype_bytes`` are ignored). Raises AttributeError naming a missing field."""
        return cls(**{f.name: int(getattr(spec, f.name)) for f in fields(cls)})


#: llama-3-8b's shape (random weights only; nothing is downloaded). A copy of the
#: simulator's preset because the backend must import nothing from sim/ (the GPU machine
#: has no pydantic); tests/sim/catalog/test_hardware.py checks that the two agree.
LLAMA3_8B = ModelShape(
    num_layers=32,
    hidden_size=4096,
    num_heads=32,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=14336,
    vocab_size=128256,
    max_model_len=8192,
)
