"""The prefix-cache key function: its two chaining implementations agree, it sees token
order and salt, and it is the same in every process (no per-process seed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from backend.blocks.prefix_hash import (
    ROOT_KEY,
    block_digests,
    chain_keys,
    next_keys,
    slot_multipliers,
)

SALTS = st.integers(-(2**63), 2**63 - 1)
TOKENS = st.integers(0, 2**31 - 1)


@given(
    block_size=st.integers(1, 32),
    num_blocks=st.integers(1, 6),
    salt=SALTS,
    data=st.data(),
)
def test_scalar_chain_equals_vectorised_steps(block_size, num_blocks, salt, data):
    tokens = data.draw(
        st.lists(TOKENS, min_size=block_size * num_blocks, max_size=block_size * num_blocks)
    )
    blocks = np.array(tokens, np.int32).reshape(num_blocks, block_size)
    digests = block_digests(blocks, slot_multipliers(block_size))
    expected = chain_keys(digests.tolist(), salt)

    parent = np.array([ROOT_KEY], np.uint64)
    salts = np.array([salt], np.int64).astype(np.uint64)
    stepped = []
    for digest in digests:
        parent = next_keys(parent, np.array([digest], np.uint64), salts)
        stepped.append(int(parent[0]))
    assert stepped == expected
    assert all(0 <= key < 2**64 for key in expected)


@given(parent=st.integers(0, 2**64 - 1), digest=st.integers(0, 2**64 - 1), a=SALTS, b=SALTS)
def test_different_salts_never_share_a_key_for_the_same_block(parent, digest, a, b):
    # salt * odd constant is a bijection mod 2**64 and so is the finaliser: exact.
    assert (chain_keys([digest], a, parent) == chain_keys([digest], b, parent)) == (a == b)


def test_digest_sees_every_slot_and_token_order():
    size = 16
    multipliers = slot_multipliers(size)
    base = np.arange(1, size + 1, dtype=np.int32)
    variants = [base]
    for slot in range(size):
        changed = base.copy()
        changed[slot] += 1
        variants.append(changed)
    swapped = base.copy()
    swapped[[0, 1]] = swapped[[1, 0]]
    variants.append(swapped)
    digests = block_digests(np.stack(variants), multipliers).tolist()
    assert len(set(digests)) == len(digests)


def test_keys_are_the_same_in_another_process():
    program = (
        "import numpy as np;"
        "from backend.blocks.prefix_hash import block_digests, chain_keys, slot_multipliers;"
        "b = np.arange(48, dtype=np.int32).reshape(3, 16);"
        "print(chain_keys(block_digests(b, slot_multipliers(16)).tolist(), 5))"
    )
    blocks = np.arange(48, dtype=np.int32).reshape(3, 16)
    here = chain_keys(block_digests(blocks, slot_multipliers(16)).tolist(), 5)
    for seed in ("1", "2"):  # a process-seeded hash (like str hashing) would differ
        out = subprocess.run(
            [sys.executable, "-c", program],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            cwd=str(Path(__file__).resolve().parents[2]),
        )
        assert out.stdout.strip() == str(here)
