"""The pure-model paged block manager (manager.py, the coordinator) and all its parts:
the block pool (block_pool.py) over a free list (freelist.py), the prefix index
(prefix_index.py) over chained prefix keys (prefix_hash.py), the sequence registry
(sequences.py), one manager per KV cache group (group_tables.py: a group's block tables
and their growth, step by step and in stretches; full_attention.py and sliding_window.py,
its kinds: every block kept, or the blocks behind a window released; kv_groups.py: the
commands of a model with several groups or a window) and the swap space (swap.py: the
CPU pool and the swap commands). The offload tiers are a KV connector beside the manager
(backend/connectors/)."""

from backend.blocks.manager import BlockManager
from backend.blocks.prefix_index import PrefixCacheStats, check_salt

__all__ = ["BlockManager", "PrefixCacheStats", "check_salt"]
