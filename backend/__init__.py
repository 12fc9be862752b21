"""KV-cache allocators: the interface, the paged block manager, contiguous baselines."""

from backend.base import (
    Allocator,
    AllocatorFactory,
    DuplicateSequence,
    InvalidRequest,
    KVUsage,
    OutOfBlocks,
    ReservingAllocator,
    UnknownSequence,
)
from backend.transfer import Medium, Transfer

__all__ = [
    "Allocator",
    "AllocatorFactory",
    "Medium",
    "Transfer",
    "DuplicateSequence",
    "InvalidRequest",
    "KVUsage",
    "OutOfBlocks",
    "ReservingAllocator",
    "UnknownSequence",
]
