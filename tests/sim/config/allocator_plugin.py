"""Allocator plug-ins for the scenario tests (``cache.allocator: module:Class``)."""

from __future__ import annotations

from backend.blocks import BlockManager


class TracedBlockManager(BlockManager):
    """The paged block manager, remembering the arguments of every instance built, so a
    test can see that a scenario used it."""

    built: list[dict] = []

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.built.append(kwargs)


class WithoutPrefixCaching(BlockManager):
    """A block manager that does not claim prefix caching."""

    supports_prefix_caching = False


class NeedsMoreArguments(BlockManager):
    """Cannot be built from the four factory arguments alone."""

    def __init__(self, *, watermark: float, **kwargs):
        super().__init__(**kwargs)


class NotAnAllocator:
    pass


class Mine(BlockManager):
    """A user's two-line subclass of the shipped manager: it gets tiers and groups."""


class WithoutConnector(BlockManager):
    supports_kv_connector = False


class WithoutGroups(BlockManager):
    supports_kv_groups = False


class ConnectorWithoutSeam(BlockManager):
    """Declares a connector but hides the methods one calls."""

    prompt_keys = None


class OldCanAllocate(BlockManager):
    """Overrides ``can_allocate`` as the Allocator contract reads, without the seam's
    ``external_blocks``."""

    def can_allocate(self, token_ids, *, salt=0, max_new_tokens=0):
        return super().can_allocate(token_ids, salt=salt, max_new_tokens=max_new_tokens)
