"""Reservation modes: how many slots a contiguous allocator reserves for a request.

Before paging, a serving engine gave each request one contiguous region of the KV pool,
sized up front because the output length is unknown when the request starts. How much
that wastes depends on how the region is sized, which is the mode:

* ``"max"``: ``max_model_len`` slots for every request (what static engines did);
* ``"pow2"``: the prompt plus the next power of two >= the true output length, so the
  output part is over-reserved by less than 2x (a generous "good guess" baseline);
* ``"oracle"``: exactly prompt + true output length (no internal waste at all; only
  external fragmentation remains, which paging also removes).
"""

from __future__ import annotations

#: reservation modes and the registered allocator names that select them
MODES = ("max", "pow2", "oracle")
NAMES = {"contiguous-max": "max", "contiguous-pow2": "pow2", "contiguous-oracle": "oracle"}


def next_pow2(n: int) -> int:
    """Smallest power of two >= n, and 0 for 0 (nothing to generate, nothing reserved)."""
    return 0 if n == 0 else 1 << (n - 1).bit_length()


def reserved_slots(mode: str, max_model_len: int, prompt_len: int, max_new_tokens: int) -> int:
    """Slots reserved under ``mode`` for a prompt of ``prompt_len`` tokens that will
    append ``max_new_tokens`` (its true output length), capped at ``max_model_len``.
    The arguments are checked by the caller."""
    if mode == "max":
        return max_model_len
    output = max_new_tokens if mode == "oracle" else next_pow2(max_new_tokens)
    return min(prompt_len + output, max_model_len)
