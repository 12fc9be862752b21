"""``cache.kv_dtype``: KV in fp8 beside bf16 weights (vLLM's ``--kv-cache-dtype``)."""

from __future__ import annotations

import numpy as np
import pytest

from sim.config.loader import validate_scenario
from sim.run.build import analytic_executor


def scenario(kv_dtype: str | None = None, **fields):
    raw = {"model": "llama-3-8b", "simulation": {"num_requests": 10}, **fields}
    if kv_dtype is not None:
        raw["cache"] = {"kv_dtype": kv_dtype}
    return validate_scenario(raw)


def test_fp8_kv_halves_a_bf16_models_kv_and_doubles_the_pool_beside_the_same_weights():
    bf16, fp8 = scenario(), scenario("fp8")
    assert fp8.model == bf16.model  # the weights are unchanged
    # (each less vLLM's null block, and the halves of an odd byte count)
    assert abs(fp8.kv_pool.device_blocks - 2 * bf16.kv_pool.device_blocks) <= 2
    assert "kv_dtype" not in bf16.cache.model_dump()  # auto: scenario.json as before
    assert fp8.cache.model_dump()["kv_dtype"] == "fp8"


def test_fp8_kv_halves_what_decode_attention_reads_and_nothing_else():
    bf16, fp8 = analytic_executor(scenario()), analytic_executor(scenario("fp8_e5m2"))
    contexts = np.full(64, 4096)
    a, b = bf16.breakdown([], contexts), fp8.breakdown([], contexts)
    assert a.linear_s == b.linear_s and a.lm_head_s == b.lm_head_s
    floor = bf16.params.decode_attention_floor_s * bf16.model.num_layers
    assert b.decode_attention_s - floor == pytest.approx((a.decode_attention_s - floor) / 2)


def test_fp8_kv_with_the_real_backend_is_one_line():
    from sim.config.errors import ScenarioError

    with pytest.raises(ScenarioError, match="cache.kv_dtype: the real backend"):
        scenario("fp8", backend={"kind": "torch"}, model="tiny", hardware="h100-sxm")


def test_an_unknown_kv_dtype_names_the_choices():
    from sim.config.errors import ScenarioError

    with pytest.raises(ScenarioError, match="cache.kv_dtype") as err:
        scenario("int4")
    assert "fp8_e5m2" in str(err.value)
