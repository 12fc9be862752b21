"""Where a block's KV lives, and the one kind of move that carries it elsewhere.

An allocator's commands that need data to move (copy-on-write, growth of a contiguous
region, swap) return :class:`Transfer` values; the engine hands them, in order, to the
executor of the step. Each names both ends: the medium and the id there. So the cost
model prices a move by its route (a device copy streams HBM twice; a swap crosses the
host link) and the real backend performs it by route, without inferring the direction
from which list a move arrived in. Tiers below the GPU (CPU memory, local disk, a store
shared by the cluster) and KV cache groups add routes and groups, not new move types.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum
from types import MappingProxyType
from typing import NamedTuple


class Medium(Enum):
    """Where a block's KV lives."""

    GPU = "gpu"  # the device pool of this instance
    CPU = "cpu"  # host memory of this instance (the swap space)
    DISK = "disk"  # local storage of this instance
    REMOTE = "remote"  # a store shared by the instances of a cluster
    PEER = "peer"  # another instance's device pool

    def __repr__(self) -> str:  # short in test failures and transfer reprs
        return self.name

    # Members are singletons compared by identity: hash them so too, in C (Enum's own
    # __hash__ is Python code, and every step with transfers counts routes in a dict).
    __hash__ = object.__hash__


GPU, CPU, DISK, REMOTE, PEER = Medium.GPU, Medium.CPU, Medium.DISK, Medium.REMOTE, Medium.PEER

#: ``(source medium, destination medium)``.
Route = tuple[Medium, Medium]
DEVICE_COPY: Route = (GPU, GPU)
SWAP_OUT: Route = (GPU, CPU)
SWAP_IN: Route = (CPU, GPU)


class Transfer(NamedTuple):
    """Copy ``count`` consecutive units from ``src`` (in ``src_medium``) into ``count``
    consecutive units from ``dst`` (in ``dst_medium``), as a slice assignment does: all
    read, then all written, so overlapping ranges of one pool move whole.

    The unit is the allocator's (see ``Allocator.block_table_layout``): a block for the
    paged managers, one token slot for the contiguous baselines, which move a region as
    one range. ``group`` is the KV cache group whose table the ids belong to (0 for a
    model with one group). The defaults make ``Transfer(src, dst)`` a copy of one device
    block, as copy-on-write is."""

    src: int
    dst: int
    src_medium: Medium = GPU
    dst_medium: Medium = GPU
    group: int = 0
    count: int = 1

    @property
    def route(self) -> Route:
        return (self.src_medium, self.dst_medium)


#: What one step moves, per route, in blocks of the cost model's block size (a range of
#: token slots is the fraction of a block it fills), as cost models take it.
MovedBlocks = Mapping[Route, float]
NO_MOVES: MovedBlocks = MappingProxyType({})


def moved_blocks(transfers: Iterable[Transfer], blocks_per_unit: float = 1.0) -> MovedBlocks:
    """How much ``transfers`` move on each route (routes in first-seen order), in blocks:
    their units times ``blocks_per_unit`` (1 for an allocator of blocks; 1 / block size
    for one whose unit is a token slot)."""
    counts: dict[Route, float] = {}
    for transfer in transfers:
        route = (transfer.src_medium, transfer.dst_medium)
        counts[route] = counts.get(route, 0) + transfer.count * blocks_per_unit
    return counts
