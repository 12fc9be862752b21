"""The pure-model paged block manager (manager.py) and all its parts: the sequence
registry (sequences.py), growth (growth.py), decode stretches (stretch.py) and swap
(swap.py), and what it composes: the block pool (block_pool.py) over a free list
(freelist.py), and the prefix index (prefix_index.py) over chained prefix keys
(prefix_hash.py)."""

from backend.blocks.manager import BlockManager
from backend.blocks.prefix_index import PrefixCacheStats, check_salt

__all__ = ["BlockManager", "PrefixCacheStats", "check_salt"]
