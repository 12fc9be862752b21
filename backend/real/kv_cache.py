"""The real KV pool: device tensors indexed by the allocator's block ids, plus a CPU pool.

One tensor holds every layer's K and V, shape ``[num_layers, 2, num_blocks, block_size,
num_kv_heads, head_dim]`` (NHD inside a block, as vLLM and FlashInfer lay it out), so a
copy-on-write or swap move of one block id is one indexed copy over all layers at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import groupby
from operator import attrgetter
from types import MappingProxyType

import numpy as np
import torch

from backend.real import ops
from backend.real.shape import ModelShape
from backend.transfer import CPU, DEVICE_COPY, GPU, PEER, Medium, Transfer


class KVCache:
    """Device KV blocks and a CPU swap pool with the same block geometry.

    Block id ``b`` of the allocator is ``data[:, :, b]`` here (CPU block ids index
    ``cpu_data``), so the pure-model allocator and this pool agree on what a block is.
    """

    def __init__(
        self,
        shape: ModelShape,
        num_blocks: int,
        block_size: int,
        *,
        num_cpu_blocks: int = 0,
        lower_tier_blocks: Mapping[Medium, int] = MappingProxyType({}),
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        use_triton: bool = False,
    ):
        if num_blocks <= 0 or block_size <= 0 or num_cpu_blocks < 0:
            raise ValueError("num_blocks and block_size must be positive")
        self.shape = shape
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.num_cpu_blocks = num_cpu_blocks
        self.device = torch.device(device)
        self.dtype = dtype
        self.use_triton = use_triton
        geometry = (shape.num_layers, 2, block_size, shape.num_kv_heads, shape.head_dim)
        self.data = torch.zeros(self._dims(geometry, num_blocks), dtype=dtype, device=self.device)
        # Pinned host memory makes device<->host copies DMA-able (and async-capable).
        pin = self.device.type == "cuda"
        self.cpu_data = torch.zeros(
            self._dims(geometry, num_cpu_blocks), dtype=dtype, pin_memory=pin
        )
        # Offload tiers below the CPU one (disk, a remote store) reach the device only
        # through the CPU pool; here each is a host tensor of its blocks, which moves the
        # same bytes a file or a store would hold.
        self.lower_data = {
            medium: torch.zeros(self._dims(geometry, blocks), dtype=dtype)
            for medium, blocks in lower_tier_blocks.items()
        }

    @staticmethod
    def _dims(geometry: tuple[int, ...], blocks: int) -> tuple[int, ...]:
        layers, two, block_size, heads, head_dim = geometry
        return (layers, two, blocks, block_size, heads, head_dim)

    def key_cache(self, layer: int) -> torch.Tensor:
        """``[num_blocks, block_size, num_kv_heads, head_dim]`` view of one layer's K."""
        return self.data[layer, 0]

    def value_cache(self, layer: int) -> torch.Tensor:
        """``[num_blocks, block_size, num_kv_heads, head_dim]`` view of one layer's V."""
        return self.data[layer, 1]

    @property
    def bytes_per_block(self) -> int:
        return self.data[:, :, 0].numel() * self.data.element_size()

    # -- block moves -------------------------------------------------------------------
    def transfer(self, transfers: Sequence[Transfer]) -> None:
        """Perform ``transfers`` in order, each run of one route as one batched move.
        Mutates the pools written. Raises ValueError for a route between pools this
        cache does not have (another instance), or that skips the CPU pool (a disk or a
        remote store reaches the device only through it), and for a range that overlaps
        itself within one pool."""
        transfers = list(_unit_moves(transfers))
        for route, run in groupby(transfers, key=attrgetter("src_medium", "dst_medium")):
            if route == DEVICE_COPY:
                self.copy_blocks(list(run))
                continue
            src, dst = (self._pool(medium) for medium in route)
            if src is None or dst is None or CPU not in route:
                src, dst = route
                raise ValueError(f"the KV cache has no move from {src.value} to {dst.value}")
            self._move_between(src, dst, list(run))

    def copy_blocks(self, moves: Sequence[Transfer]) -> None:
        """Copy-on-write: device block ``src`` -> device block ``dst`` for every move, all
        layers, with the result of performing the moves in order. Independent moves go in
        one batched launch. Mutates device blocks."""
        for wave in independent_waves(moves, same_pool=True):
            src, dst = self._move_indices(wave, self.device, self.device)
            ops.copy_blocks(self.data, src, dst, use_triton=self.use_triton)

    def _move_between(self, source: torch.Tensor, target: torch.Tensor, moves) -> None:
        """Block ``src`` of ``source`` -> block ``dst`` of ``target`` (two pools: the
        device's, the CPU's, a lower tier's) for every move, in order: one gather, one
        copy across, one scatter per wave. Mutates ``target`` only."""
        for wave in independent_waves(moves, same_pool=False):
            src, dst = self._move_indices(wave, source.device, target.device)
            target.index_copy_(2, dst, source.index_select(2, src).to(target.device))

    def receive(self, moves: Sequence[Transfer], peer: KVCache) -> None:
        """A prefill/decode hand-off's read: block ``src`` of ``peer``'s device pool (route
        PEER -> GPU) into block ``dst`` of this one, all layers, for every move, in order.
        Mutates this cache's device blocks only. Raises ValueError for another route or a
        peer of another block geometry."""
        moves = list(_unit_moves(moves))
        bad = next((m for m in moves if m.route != (PEER, GPU)), None)
        if bad is not None:
            src, dst = bad.route
            raise ValueError(f"a read from a peer goes peer -> gpu, not {src.value} -> {dst.value}")
        if peer.data.shape[:2] + peer.data.shape[3:] != self.data.shape[:2] + self.data.shape[3:]:
            raise ValueError("the peer's KV blocks have another geometry")
        self._move_between(peer.data, self.data, moves)

    def _pool(self, medium: Medium) -> torch.Tensor | None:
        """The tensor of ``medium``'s blocks (None: this cache keeps none there)."""
        if medium is GPU:
            return self.data
        return self.cpu_data if medium is CPU else self.lower_data.get(medium)

    @staticmethod
    def _move_indices(
        moves: Sequence[Transfer], src_device: torch.device, dst_device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The moves' source and destination block ids, each on the device of the pool
        it indexes (no round trip through the GPU for the CPU pool's ids)."""
        pairs = torch.tensor([(m.src, m.dst) for m in moves], dtype=torch.int64)
        return pairs[:, 0].to(src_device), pairs[:, 1].to(dst_device)

    # -- reading back (tests, debugging) -------------------------------------------------
    def read_sequence(
        self, block_table: Sequence[int], num_tokens: int, *, on_cpu: bool = False
    ) -> torch.Tensor:
        """K/V of a sequence's first ``num_tokens`` tokens through its block table:
        ``[num_layers, 2, num_tokens, num_kv_heads, head_dim]``. No mutation."""
        pool = self.cpu_data if on_cpu else self.data
        table = torch.as_tensor(list(block_table), dtype=torch.int64, device=pool.device)
        blocks = pool.index_select(2, table)
        layers, two, nb, bs, heads, dim = blocks.shape
        return blocks.reshape(layers, two, nb * bs, heads, dim)[:, :, :num_tokens]


def _unit_moves(transfers: Sequence[Transfer]) -> Iterator[Transfer]:
    """``transfers`` one block each: a range of ``count`` blocks as its blocks in order
    (the paged manager moves single blocks; a range comes from an allocator of regions).
    Raises ValueError for a range whose source and destination overlap in one pool,
    which block by block would read what it had just written."""
    for move in transfers:
        if move.count == 1:
            yield move
            continue
        same_pool = move.src_medium is move.dst_medium
        if same_pool and abs(move.src - move.dst) < move.count:
            raise ValueError(f"{move!r} overlaps itself: the KV cache moves blocks one by one")
        for i in range(move.count):
            yield move._replace(src=move.src + i, dst=move.dst + i, count=1)


def independent_waves(moves: Sequence[Transfer], *, same_pool: bool) -> Iterator[list[Transfer]]:
    """Split moves into consecutive waves that can each run as one parallel launch and
    still give the result of performing every move in order.

    A wave ends before a move that writes a block the wave already writes (the later write
    must win) or, within one pool, reads a block the wave writes or writes a block the wave
    reads (a parallel kernel would race). The allocator's moves are almost always one wave.
    """
    wave: list[Transfer] = []
    reads: set[int] = set()
    writes: set[int] = set()
    for move in moves:
        src, dst = move.src, move.dst
        conflict = dst in writes
        if same_pool:
            conflict = conflict or src in writes or dst in reads
        if conflict:
            yield wave
            wave, reads, writes = [], set(), set()
        wave.append(move)
        reads.add(src)
        writes.add(dst)
    if wave:
        yield wave


def slot_mapping(
    tables: np.ndarray,
    num_blocks: np.ndarray,
    rows: np.ndarray,
    positions: np.ndarray,
    block_size: int,
    seq_ids: Sequence[int],
) -> np.ndarray:
    """Flat slot ids (``block * block_size + offset``) of a step's tokens, in one pass.

    Token ``i`` sits at position ``positions[i]`` of sequence ``seq_ids[rows[i]]``, whose
    block table is row ``rows[i]`` of ``tables`` (padded to a rectangle; the row holds
    ``num_blocks[row]`` real blocks). Raises ValueError, naming the sequence, if a token
    lies beyond its sequence's block table."""
    index = positions // block_size
    beyond = index >= num_blocks[rows]
    if beyond.any():
        first = int(np.argmax(beyond))
        row = int(rows[first])
        raise ValueError(
            f"sequence {seq_ids[row]}: position {int(positions[first])} lies beyond its "
            f"{int(num_blocks[row])} blocks of {block_size} slots"
        )
    return tables[rows, index].astype(np.int64) * block_size + positions % block_size
