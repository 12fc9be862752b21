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


@pytest.fixture(autouse=True)
def one_torch_thread():
    # Tiny tensors gain nothing from intra-op threads, and on a shared 2-core CI machine
    # their spin-waiting makes every op 10-50x slower. Restored after each test.
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
