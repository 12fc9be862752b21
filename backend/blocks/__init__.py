"""The pure-model paged block manager (manager.py) and its parts: the sequence registry
(sequences.py), growth (growth.py) and swap (swap.py); the block pool and the prefix
index it composes live beside it (backend/block_pool.py, backend/prefix_index.py)."""

from backend.blocks.manager import BlockManager
from backend.prefix_index import PrefixCacheStats, check_salt

__all__ = ["BlockManager", "PrefixCacheStats", "check_salt"]
