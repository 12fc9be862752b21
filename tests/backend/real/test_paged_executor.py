"""Executor and model plumbing: shape from a spec, bad batches, Triton being optional."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest

from backend.real import ModelShape
from backend.step import Batch, PrefillChunk

from .harness import TINY, PagedHarness


def test_shape_from_spec_ignores_extras_and_names_missing_fields():
    spec = SimpleNamespace(**TINY.__dict__, name="tiny", dtype_bytes=2)
    assert ModelShape.from_spec(spec) == TINY
    del spec.head_dim
    with pytest.raises(AttributeError, match="head_dim"):
        ModelShape.from_spec(spec)
    with pytest.raises(ValueError, match="multiple"):
        ModelShape(
            1,
            8,
            num_heads=6,
            num_kv_heads=4,
            head_dim=2,
            intermediate_size=8,
            vocab_size=8,
            max_model_len=8,
        )


def test_token_beyond_its_block_table_is_refused_before_any_compute():
    harness = PagedHarness(num_blocks=8, block_size=4)
    harness.admit(0, [1, 2, 3])
    empty = np.zeros(0, dtype=np.int64)
    beyond = Batch((PrefillChunk(0, 2, np.array([3, 4, 5], np.int32)),), empty, empty, empty)
    with pytest.raises(ValueError, match="beyond"):
        harness.executor.execute(beyond)
    outside = Batch((PrefillChunk(0, 0, np.array([1, TINY.vocab_size], np.int32)),), *[empty] * 3)
    with pytest.raises(ValueError, match="vocab"):
        harness.executor.execute(outside)


def test_samples_every_chunk_end_and_decode():
    harness = PagedHarness(num_blocks=16, block_size=4)
    for s in (0, 1):
        harness.admit(s, [5, 6, 7, 8, 9])
    harness.step([(0, 0, [5, 6, 7, 8, 9])])
    sampled, logits = harness.step([(1, 0, [5, 6])], decodes={0: 3})
    assert set(sampled) == {0, 1}
    assert logits[0].shape == logits[1].shape == (TINY.vocab_size,)


def test_torch_paths_work_without_triton():
    # A fresh interpreter in which `import triton` fails, as on a machine without it.
    script = textwrap.dedent(
        """
        import sys
        sys.modules["triton"] = None
        import numpy as np
        from backend.blocks import BlockManager
        from backend.real import PagedExecutor, ModelShape, ops
        from backend.step import Batch, PrefillChunk
        shape = ModelShape(1, 16, 2, 1, 8, 16, 32, 64)
        alloc = BlockManager(4, 4)
        alloc.allocate(0, [1, 2, 3])
        ex = PagedExecutor(shape, alloc)
        assert not ex.use_triton and not ops.triton_available()
        e = np.zeros(0, np.int64)
        ex.execute(Batch((PrefillChunk(0, 0, np.array([1, 2, 3], np.int32)),), e, e, e))
        assert set(ex.last_sampled) == {0}
        try:
            PagedExecutor(shape, alloc, use_triton=True).execute(
                Batch((PrefillChunk(0, 0, np.array([1, 2, 3], np.int32)),), e, e, e))
        except RuntimeError as err:
            assert "triton" in str(err)
        else:
            raise AssertionError("use_triton=True without triton must fail loudly")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
