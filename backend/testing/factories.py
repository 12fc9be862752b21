"""The shipped allocators as :class:`~backend.base.AllocatorFactory` s, by the names a
scenario's ``cache.allocator`` uses, so the checker can run on each of them."""

from __future__ import annotations

from backend.base import AllocatorFactory
from backend.blocks import BlockManager
from backend.contiguous import NAMES, ContiguousAllocator
from backend.shipped import PAGED


def contiguous_factory(mode: str) -> AllocatorFactory:
    """A contiguous baseline of reservation ``mode`` over ``num_blocks * block_size``
    slots; it has no prefix cache. ``max_model_len`` is half the pool (at least 4
    tokens), so that even ``max`` mode holds two requests at once."""

    def build(*, num_blocks, block_size, num_cpu_blocks, enable_prefix_caching=False):
        slots = num_blocks * block_size
        return ContiguousAllocator(
            slots,
            mode=mode,
            max_model_len=min(slots, max(4, slots // 2)),
            num_cpu_slots=num_cpu_blocks * block_size,
        )

    build.__name__ = build.__qualname__ = f"Contiguous{mode.capitalize()}"
    build.supports_prefix_caching = False  # type: ignore[attr-defined]
    return build


#: cache.allocator name -> factory (the paged manager with its default LRU evictor)
SHIPPED: dict[str, AllocatorFactory] = {
    PAGED: BlockManager,
    **{name: contiguous_factory(mode) for name, mode in NAMES.items()},
}
