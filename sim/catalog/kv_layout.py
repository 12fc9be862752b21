"""How a model's KV cache is laid out in blocks: its layers' attention types grouped into
KV cache groups, as vLLM's hybrid KV cache manager groups them (read from vLLM 0.33's
``v1/core/kv_cache_planning.py``, ``_get_kv_cache_groups_uniform_page_size``).

Layers of one attention type (full attention, or a sliding window of ``W`` tokens)
share a block table. When a model mixes types, every group holds the same number of
layers, so that a block (one page per layer of its group) has one size whatever group
takes it and all groups draw from one pool. The group size is the smallest type's layer
count (the "1" of the n:1 patterns shipped models use; gpt-oss alternates 1:1, Gemma 3
runs 5 windows to 1 full layer), or the largest type's when it is under 1.5 times the
smallest; each type's layers fill ``ceil(count / size)`` groups, the last one padded.
A model whose layers are all of one type is one group of all of them.

A block is then ``block_size`` tokens of KV for ``layers_per_group`` layers, and a
sequence holds a table in each group: the KV a pool of a given size holds per token
falls with the share of layers that keep only a window.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from backend.base import KVGroup


class KVLayout(NamedTuple):
    """A model's KV cache groups (in the order vLLM numbers them: by each type's first
    layer) and the layers each holds, padding included."""

    groups: tuple[KVGroup, ...]
    layers_per_group: int

    @property
    def is_plain(self) -> bool:
        """One full-attention group: every layer keeps every token."""
        return self.groups == (KVGroup(),)

    def describe(self) -> str:
        kinds: dict[KVGroup, int] = {}
        for group in self.groups:
            kinds[group] = kinds.get(group, 0) + 1
        parts = ", ".join(f"{count} x {group.describe()}" for group, count in kinds.items())
        count = len(self.groups)
        groups = "1 KV cache group" if count == 1 else f"{count} KV cache groups"
        return f"{groups} of {self.layers_per_group} layers: {parts}"


def kv_layout(kinds: Sequence[tuple[int | None, int]]) -> KVLayout:
    """The KV cache groups of a model whose layers are ``kinds``: ``(window in tokens,
    or None for full attention, how many layers)``, in the order of each kind's first
    layer. ValueError for no layers."""
    counts = {window: count for window, count in kinds if count > 0}
    if not counts:
        raise ValueError("a model has at least one layer")
    if len(counts) == 1:
        ((window, count),) = counts.items()
        return KVLayout((KVGroup(window),), count)
    smallest, largest = min(counts.values()), max(counts.values())
    size = largest if largest < smallest * 1.5 else smallest
    groups = tuple(
        KVGroup(window) for window, count in counts.items() for _ in range(-(-count // size))
    )
    return KVLayout(groups, size)
