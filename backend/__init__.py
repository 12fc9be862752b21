"""KV-cache allocators: the interface, the paged block manager, contiguous baselines."""

from backend.base import (
    Allocator,
    BlockMove,
    DuplicateSequence,
    InvalidRequest,
    KVUsage,
    OutOfBlocks,
    ReservingAllocator,
    UnknownSequence,
)

__all__ = [
    "Allocator",
    "BlockMove",
    "DuplicateSequence",
    "InvalidRequest",
    "KVUsage",
    "OutOfBlocks",
    "ReservingAllocator",
    "UnknownSequence",
]
