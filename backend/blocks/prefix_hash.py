"""Prefix-cache keys: a 64-bit hash chained over (parent key, tenant salt, block tokens).

    key(parent, tokens, salt) = fmix64(parent * P + digest(tokens) + salt * S)   (mod 2**64)
    digest(tokens)            = sum_j tokens[j] * M[j]                            (mod 2**64)

``M`` are fixed odd 64-bit multipliers, one per slot of a block (so the order of the
tokens matters), ``P`` and ``S`` odd constants, and ``fmix64`` MurmurHash3's 64-bit
finaliser (a bijection that spreads every input bit over the output). The first block
of a sequence has the parent ``ROOT_KEY``.

A false hit needs two different prefixes whose keys collide (about 2**-64 for a pair of
unrelated chains) *and* whose colliding blocks hold the same tokens under the same salt
(the block manager checks both before reusing a block). That is the strength of the
64-bit hashes serving engines key their prefix caches with.

Why not a cryptographic hash: the decode step fills up to one block per running
sequence, and a multiply-and-sum hash runs over all of them in a few numpy passes,
where hashlib costs a Python call per block. A simulator is not an adversarial setting,
and a key collision can only cost a cache hit, never correctness: the block manager
verifies every hit against the cached block's tokens and salt before reusing it. Keys
are deterministic (no per-process seed), so the same run gives the same hits.

Two implementations of the chaining step, one over Python ints (a prompt's blocks,
chained one after another) and one over numpy arrays (one block for each of many
sequences); ``tests/backend/test_prefix_hash.py`` and the block manager's invariant
check hold them to the same results.
"""

from __future__ import annotations

import numpy as np

# The parent key of every sequence's first block. Not 0: fmix64(0) == 0, so with a zero
# root a block of zeros under salt 0 would get key 0 at every position of its chain.
ROOT_KEY = 0x243F6A8885A308D3
_MASK = (1 << 64) - 1
_PARENT_MUL = 0x9E3779B97F4A7C15  # odd: multiplying by it is a bijection mod 2**64
_SALT_MUL = 0xD6E8FEB86659FD93  # odd, so different salts never collide on equal input
_FMIX_1 = 0xFF51AFD7ED558CCD
_FMIX_2 = 0xC4CEB9FE1A85EC53
_MULTIPLIER_SEED = 0x5EED_B10C


def slot_multipliers(block_size: int) -> np.ndarray:
    """The fixed odd multipliers ``M`` of a block's slots (uint64, deterministic)."""
    rng = np.random.default_rng(_MULTIPLIER_SEED)
    high = np.iinfo(np.uint64).max
    return rng.integers(0, high, size=block_size, dtype=np.uint64, endpoint=True) | np.uint64(1)


def block_digests(blocks: np.ndarray, multipliers: np.ndarray) -> np.ndarray:
    """``digest`` of every row of ``blocks`` (int32 ``[n, block_size]``, non-negative
    token ids): uint64 ``[n]``. numpy wraps uint64 arithmetic, which is the mod 2**64."""
    return (blocks.astype(np.uint64) * multipliers).sum(axis=1, dtype=np.uint64)


def chain_keys(digests: list[int], salt: int, parent: int = ROOT_KEY) -> list[int]:
    """The keys of consecutive blocks of one sequence, from their digests (Python ints),
    chained from ``parent``."""
    salted = (salt * _SALT_MUL) & _MASK
    keys = []
    for digest in digests:
        x = (parent * _PARENT_MUL + digest + salted) & _MASK
        x ^= x >> 33
        x = (x * _FMIX_1) & _MASK
        x ^= x >> 33
        x = (x * _FMIX_2) & _MASK
        parent = x ^ (x >> 33)
        keys.append(parent)
    return keys


def next_keys(parents: np.ndarray, digests: np.ndarray, salts: np.ndarray) -> np.ndarray:
    """One chaining step for many sequences at once: the key of each sequence's next
    block from its parent key, the block's digest and the sequence's salt (uint64
    arrays of equal length; a negative int64 salt cast to uint64 is ``salt mod 2**64``,
    as in ``chain_keys``)."""
    x = parents * np.uint64(_PARENT_MUL) + digests + salts * np.uint64(_SALT_MUL)
    x ^= x >> np.uint64(33)
    x *= np.uint64(_FMIX_1)
    x ^= x >> np.uint64(33)
    x *= np.uint64(_FMIX_2)
    x ^= x >> np.uint64(33)
    return x


def prefix_keys(tokens: np.ndarray, salt: int, block_size: int) -> list[int]:
    """The keys of every full block of a token sequence under ``salt``: what the block
    manager publishes those blocks under (for policies that reason about prefixes; the
    manager's index hashes the same way with its multipliers kept)."""
    full = tokens.shape[0] // block_size
    blocks = np.asarray(tokens[: full * block_size]).reshape(full, block_size)
    return chain_keys(block_digests(blocks, slot_multipliers(block_size)).tolist(), salt)
