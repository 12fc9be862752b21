"""The allocators pagesim ships, by the name a scenario's ``cache.allocator`` gives them:
the one list that validation, the builder, ``pagesim check-allocator`` and its factories
read.
"""

from __future__ import annotations

from backend.contiguous.modes import NAMES as CONTIGUOUS_NAMES

#: the paged block manager, then the contiguous baselines (backend/contiguous/modes.py)
PAGED = "paged"
SHIPPED_ALLOCATORS: tuple[str, ...] = (PAGED, *CONTIGUOUS_NAMES)
