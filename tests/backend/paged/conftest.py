"""Fresh random inputs every run, with the seed printed so a failure can be replayed."""

import os
import secrets

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    # PAGED_TEST_SEED replays a failing run; the seed is printed (shown on failure).
    seed = int(os.environ.get("PAGED_TEST_SEED", secrets.randbits(32)))
    print(f"PAGED_TEST_SEED={seed}")
    return np.random.default_rng(seed)
