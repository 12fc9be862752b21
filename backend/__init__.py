"""KV-cache allocators: the interface, the paged block manager, contiguous baselines."""

from backend.base import (
    Allocator,
    BlockMove,
    DuplicateSequence,
    InvalidRequest,
    KVUsage,
    OutOfBlocks,
    UnknownSequence,
)

__all__ = [
    "Allocator",
    "BlockMove",
    "DuplicateSequence",
    "InvalidRequest",
    "KVUsage",
    "OutOfBlocks",
    "UnknownSequence",
]
