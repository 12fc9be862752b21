"""The allocator answers in its own units: what tokens take, in blocks (backend.base)."""

from __future__ import annotations

import numpy as np
import pytest

from backend.blocks import BlockManager


@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_sizes_agree_with_what_appending_takes(block_size):
    manager = BlockManager(64, block_size)
    held = 0
    rng = np.random.default_rng(block_size)
    manager.allocate(0, [1])
    held = 1
    for _ in range(20):
        add = int(rng.integers(1, 9))
        before = manager.usage().used_blocks
        expected = manager.blocks_to_grow(held, held + add)
        fits = add <= manager.tokens_that_fit(held, manager.available_blocks())
        assert fits == (expected <= manager.available_blocks())
        if not fits:
            break
        manager.append(0, list(range(add)))
        held += add
        assert manager.usage().used_blocks - before == expected
    assert manager.blocks_for_tokens(held) == manager.usage().used_blocks


def test_forks_share_the_full_blocks_of_their_prompt():
    manager = BlockManager(64, 4)
    # 3 samples of 10 tokens whose first 6 are one prompt: 1 full prompt block shared
    assert manager.blocks_for_samples(6, 10, 3) == 1 + 3 * (3 - 1)
    assert manager.blocks_for_samples(6, 10, 1) == manager.blocks_for_tokens(10) == 3
