"""KV-cache allocators: the interface, the paged block manager, contiguous baselines."""

from backend.base import (
    Allocator,
    AllocatorFactory,
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
    "AllocatorFactory",
    "BlockMove",
    "DuplicateSequence",
    "InvalidRequest",
    "KVUsage",
    "OutOfBlocks",
    "ReservingAllocator",
    "UnknownSequence",
]
