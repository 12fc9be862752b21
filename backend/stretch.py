"""Decode stretches: several decode steps of one fixed batch, asked of an allocator at once.

When nothing but a fixed set of sequences decodes for ``k`` steps (nothing arrives,
finishes or is preempted), the engine may hand the allocator all ``k`` steps in one call
(``append_steps``) instead of ``k`` calls of ``append_batch``. An allocator opts in by
having both methods below (:class:`DecodeStretches`); the engine steps one at a time with any other.

* ``plain_decode_steps(seq_ids, limit) -> int``: how many steps, up to ``limit``, the
  distinct on-device ``seq_ids`` can take, one token each per step, with no
  copy-on-write and no block but free ones (nothing evicted, nothing refused): the most
  such steps, or fewer where counting them exactly would cost more than it saves (the
  paged manager does not count what sliding windows give back during the stretch). No
  mutation.
* ``append_steps(seq_ids, token_ids) -> dict[str, np.ndarray]``: ``token_ids`` has one
  row per step; the call must leave the allocator exactly as ``append_batch`` row after
  row would (tables, block ids, memory, prefix keys, counters), and returns the
  ``KVUsage`` fields after each step as arrays (one entry per row). Only valid within
  what ``plain_decode_steps`` granted. An allocator told when steps begin
  (capabilities.ReleasesBehindProcessed) takes each row after the first as a step that
  began as the first did.

:func:`append_steps_one_by_one` is the reference both are tested against.
"""

from __future__ import annotations

from functools import partial
from typing import Protocol, runtime_checkable

import numpy as np

from backend.base import Allocator, KVUsage


@runtime_checkable
class DecodeStretches(Protocol):
    """An allocator that can run a decode stretch in one call (this module's doc)."""

    def plain_decode_steps(self, seq_ids: np.ndarray, limit: int) -> int: ...

    def append_steps(self, seq_ids: np.ndarray, token_ids: np.ndarray) -> dict: ...


def usage_columns(usages: list[KVUsage]) -> dict[str, np.ndarray]:
    """``KVUsage`` values as one int64 array per field."""
    return {
        name: np.fromiter((u[i] for u in usages), dtype=np.int64, count=len(usages))
        for i, name in enumerate(KVUsage._fields)
    }


def append_steps_one_by_one(
    allocator: Allocator, seq_ids: np.ndarray, token_ids: np.ndarray, *, lag: bool | None = None
) -> dict[str, np.ndarray]:
    """What ``append_steps`` must equal: one ``append_batch`` per row, ``usage()`` after
    each, and, for an allocator told when steps begin (``lag`` not None:
    capabilities.ReleasesBehindProcessed), ``begin_step(lag=lag)`` between two rows, as
    the engine began the first. Mutates ``allocator``; raises what ``append_batch``
    raises."""
    append = partial(allocator.append_batch, seq_ids)
    next_step = None if lag is None else partial(allocator.begin_step, lag=lag)
    return append_rows(append, np.asarray(token_ids), allocator.usage, next_step)


def append_rows(append_row, token_rows: np.ndarray, usage, next_step=None) -> dict:
    """``append_row(row)`` for each row of ``token_rows``, ``usage()`` after each, and
    ``next_step()`` between two rows (a step beginning, for an allocator that counts
    them): a stretch taken step by step. Mutates what the callables do."""
    usages = []
    for number, row in enumerate(token_rows):
        if number and next_step is not None:
            next_step()
        append_row(row)
        usages.append(usage())
    return usage_columns(usages)


def paged_usage_by_step(
    crossing: np.ndarray,
    cached: int,
    free: int,
    token_slots: int,
    batch: int,
    num_blocks: int,
    block_size: int,
    evicted: int,
) -> dict[str, np.ndarray]:
    """A paged pool's usage after each step of a stretch of ``batch`` sequences, from its
    counts before it and ``crossing`` (per step, which sequences took a new block): a
    stretch takes only free blocks (never evicts) and writes one token per sequence."""
    taken = np.cumsum(np.count_nonzero(crossing, axis=1))
    tokens = token_slots + batch * np.arange(1, crossing.shape[0] + 1)
    cached_blocks = np.full(crossing.shape[0], cached, dtype=np.int64)
    return usage_by_step(free - taken, cached_blocks, tokens, num_blocks, block_size, evicted)


def usage_by_step(
    free_blocks: np.ndarray,
    cached_blocks: np.ndarray,
    tokens: np.ndarray,
    num_blocks: int,
    block_size: int,
    evicted: int,
) -> dict[str, np.ndarray]:
    """A paged pool's ``KVUsage`` columns from its free and cached blocks and its token
    slots after each step of a stretch (which evicts nothing)."""
    used_blocks = num_blocks - free_blocks - cached_blocks
    zeros = np.zeros(free_blocks.shape[0], dtype=np.int64)
    return {
        "total_slots": zeros + num_blocks * block_size,
        "token_slots": tokens,
        "reserved_slots": zeros,
        "internal_frag_slots": used_blocks * block_size - tokens,
        "external_frag_slots": zeros.copy(),
        "free_slots": (free_blocks + cached_blocks) * block_size,
        "cached_slots": cached_blocks * block_size,
        "used_blocks": used_blocks,
        "cached_blocks": cached_blocks,
        "free_blocks": free_blocks,
        "evictions": zeros + evicted,
    }
