"""Mixture-of-experts models: what is read, counted and priced (sim/catalog/moe.py,
sim/costs/moe.py)."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import yaml

from sim.catalog.moe import expected_touched
from sim.cli import main
from sim.config.loader import validate_scenario
from sim.costs.moe import block_m, expected_tiles
from sim.run.build import analytic_executor

ROOT = Path(__file__).resolve().parents[3]

#: Published totals and active parameters (billions): the model cards' names and tables.
PUBLISHED = {
    "qwen3-30b-a3b": (30.5, 3.3),  # Qwen3 technical report, Table 2
    "qwen3-235b-a22b": (235.1, 22.2),
    "mixtral-8x7b": (46.7, 12.9),  # Mixtral of Experts (Jiang et al. 2024): 47B, 13B active
    "qwen2-57b-a14b": (57.4, 14.2),
}


def scenario(stem: str, **fields):
    raw = {"model": {"config": f"models/{stem}.json"}, "hardware": "h100-sxm", **fields}
    raw.setdefault("simulation", {"num_requests": 10})
    return validate_scenario(raw, base_dir=ROOT / "scenarios")


@pytest.mark.parametrize("stem", sorted(PUBLISHED))
def test_weights_count_every_expert_and_flops_the_active_ones(stem):
    tp = 4 if stem in ("qwen3-235b-a22b", "mixtral-8x7b", "qwen2-57b-a14b") else 1
    model = scenario(stem, tensor_parallel=tp, hardware="h200").model
    total, active = PUBLISHED[stem]
    assert abs(model.num_params / 1e9 - total) < 0.1
    assert abs(model.active_params / 1e9 - active) < 0.1
    assert model.linear_flops_per_token < 2 * model.num_params / 3  # far below the total


def test_a_dense_model_counts_as_before():
    model = validate_scenario({"model": "llama-3-8b", "simulation": {"num_requests": 1}}).model
    assert model.moe is None and model.active_params == model.num_params
    assert "moe" not in model.model_dump() and "mla" not in model.model_dump()


def test_distinct_experts_touched_grow_from_k_to_all():
    assert expected_touched(128, 8, 1) == pytest.approx(8)
    assert expected_touched(128, 8, 10_000) == pytest.approx(128)
    counts = [expected_touched(128, 8, t) for t in (1, 2, 4, 8, 16, 64)]
    assert counts == sorted(counts) and counts[-1] < 128


@pytest.mark.parametrize(
    "tokens, experts, k", [(1, 128, 8), (37, 128, 8), (512, 8, 2), (3000, 64, 8)]
)
def test_padded_tiles_match_a_monte_carlo_of_uniform_routing(tokens, experts, k):
    rng = np.random.default_rng(0)
    rows = block_m(tokens)
    trials = 400
    tiles = 0
    for _ in range(trials):
        choice = np.argsort(rng.random((tokens, experts)), axis=1)[:, :k]  # k distinct
        per_expert = np.bincount(choice.ravel(), minlength=experts)
        tiles += np.ceil(per_expert / rows).sum()
    simulated = tiles / trials
    predicted = experts * expected_tiles(tokens, k / experts, rows)
    assert predicted == pytest.approx(simulated, rel=0.02)


@pytest.mark.parametrize(
    "tokens, share, rows",
    [
        (1, 0.01, 16),
        (3, 0.5, 16),
        (37, 1 / 16, 16),
        (100, 0.25, 16),
        (500, 0.25, 128),
        (1000, 1 / 16, 64),
        (400, 0.99, 128),
    ],
)
def test_expected_tiles_is_the_exact_binomial_expectation(tokens, share, rows):
    """Against the sum over every n in exact rational arithmetic."""
    p = Fraction(share)
    exact = sum(
        math.comb(tokens, n) * p**n * (1 - p) ** (tokens - n) * math.ceil(n / rows)
        for n in range(tokens + 1)
    )
    assert expected_tiles(tokens, share, rows) == pytest.approx(float(exact), rel=1e-11)


def test_block_m_follows_vllms_default_config():
    assert [block_m(t) for t in (1, 32, 33, 96, 97, 512, 513, 8192)] == [
        16,
        16,
        32,
        32,
        64,
        64,
        128,
        128,
    ]


def test_a_decode_step_reads_the_experts_its_tokens_touch():
    """One token reads k experts' weights; 64 tokens touch nearly all 128, so a decode
    step of a sparse model grows far faster with the batch than a dense one's."""
    moe = analytic_executor(scenario("qwen3-30b-a3b"))
    layer = moe.moe
    gate_up_bytes = 2048 * 2 * 768 * 2  # one expert's gate and up projections, bf16
    one = layer.ops(1)["moe_gate_up"]
    reads = (one - moe.params.kernel_floor_s) * layer._bytes_s
    assert reads == pytest.approx(8 * gate_up_bytes, rel=0.02)
    step = [moe.predict([], np.full(t, 512)) for t in (1, 64)]
    dense = analytic_executor(
        validate_scenario({"model": "llama-3-8b", "simulation": {"num_requests": 1}})
    )
    dense_step = [dense.predict([], np.full(t, 512)) for t in (1, 64)]
    assert step[1] / step[0] > 3 * dense_step[1] / dense_step[0]


def test_prefill_is_priced_on_the_active_experts():
    """A long prefill is compute bound: its GEMM time is within the padded active FLOPs
    at the grouped kernels' rate, not the whole model's."""
    moe = analytic_executor(scenario("qwen3-30b-a3b"))
    tokens = 8192
    linear = moe.breakdown([(0, tokens)], np.zeros(0, np.int64)).linear_s
    flops = moe.model.linear_flops_per_token * tokens
    assert linear < 2 * flops / (moe.kernels.peak_flops * 0.5)
    assert linear > flops / moe.kernels.peak_flops


@pytest.mark.parametrize("tp, ep", [(1, False), (2, False), (2, True), (4, True)])
def test_every_part_of_a_moe_step_is_positive(tp, ep):
    moe = analytic_executor(scenario("qwen3-30b-a3b", tensor_parallel=tp, expert_parallel=ep))
    for step in ([], np.full(40, 700)), ([(0, 512)], np.full(8, 100)):
        parts = moe.breakdown(*step)
        assert all(part >= 0 for part in parts), parts
        assert parts.elementwise_s > 0 and parts.linear_s > 0
        assert (parts.allreduce_s > 0) == (tp > 1)


def test_expert_parallel_keeps_whole_experts_on_each_gpu():
    tp = scenario("qwen3-30b-a3b", tensor_parallel=2)
    ep = scenario("qwen3-30b-a3b", tensor_parallel=2, expert_parallel=True)
    assert "expert_parallel" not in tp.model_dump() and ep.model_dump()["expert_parallel"]
    sharded, whole = analytic_executor(tp).moe, analytic_executor(ep).moe
    assert (sharded.local_experts, sharded.width) == (128, 384)
    assert (whole.local_experts, whole.width) == (64, 768)
    # one token: TP reads k half-experts; EP reads the k/2 local experts, whole
    assert whole.ops(1)["moe_gate_up"] == pytest.approx(sharded.ops(1)["moe_gate_up"], rel=0.05)


def test_same_scenario_same_seed_same_outputs(tmp_path):
    path = tmp_path / "s.yaml"
    config = (ROOT / "scenarios/models/qwen3-30b-a3b.json").read_text()
    (tmp_path / "q.json").write_text(config)
    path.write_text(
        yaml.safe_dump({"model": {"config": "q.json"}, "simulation": {"num_requests": 60}})
    )
    outs = []
    for name in ("a", "b"):
        assert (
            main(["run", str(path), "--out", str(tmp_path / name), "--quiet", "--no-report"]) == 0
        )
        outs.append((tmp_path / name / "steps.csv").read_bytes())
    assert outs[0] == outs[1]


@pytest.mark.parametrize(
    "fields, field, message",
    [
        ({"expert_parallel": True, "tensor_parallel": 3}, "tensor_parallel", "num_heads"),
        ({"expert_parallel": True}, "", ""),  # one GPU: EP is a no-op, valid
        (
            {
                "model": {"config": "models/mixtral-8x7b.json"},
                "tensor_parallel": 16,
                "expert_parallel": True,
            },
            "expert_parallel",
            "must divide the 8 experts",
        ),
        ({"model": "llama-3-8b", "expert_parallel": True}, "expert_parallel", "has no experts"),
        (
            {
                "model": {
                    "config": "models/qwen3-30b-a3b.json",
                    "moe": {
                        "num_experts": 4,
                        "experts_per_token": 8,
                        "expert_intermediate_size": 64,
                    },
                }
            },
            "model.moe",
            "experts_per_token (8) must be at most num_experts (4)",
        ),
        (
            {
                "model": {"config": "models/qwen3-30b-a3b.json"},
                "cost_model": {"kind": "profile", "path": "../validation/vidur-profiling"},
            },
            "cost_model",
            "dense models only",
        ),
    ],
)
def test_bad_moe_settings_are_one_line_exit_2(tmp_path, capsys, fields, field, message):
    raw = {"model": {"config": "models/qwen3-30b-a3b.json"}, "simulation": {"num_requests": 2}}
    raw.update(fields)
    path = ROOT / "scenarios" / f".moe-{tmp_path.name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    try:
        code = main(["run", str(path), "--out", str(tmp_path / "o"), "--quiet", "--no-report"])
    finally:
        path.unlink()
    err = capsys.readouterr().err.strip()
    if not field:
        assert code == 0
        return
    assert code == 2 and len(err.splitlines()) == 1
    assert f"{path.name}: {field}" in err and message in err
    assert not (tmp_path / "o").exists()


def test_mlp_only_layers_and_sparse_steps_make_dense_layers(tmp_path):
    import json

    raw = json.loads((ROOT / "scenarios/models/qwen3-30b-a3b.json").read_text())
    raw.update(decoder_sparse_step=2, mlp_only_layers=[0])  # odd layers MoE, 0 dense
    (tmp_path / "c.json").write_text(json.dumps(raw))
    model = validate_scenario(
        {"model": {"config": "c.json"}, "simulation": {"num_requests": 1}}, base_dir=tmp_path
    ).model
    # layers 1, 3, ..., 47 are MoE (i + 1 even); 0 is dense either way
    assert model.moe.dense_layers == 24
    assert model.moe.moe_layers(48) == 24
    assert math.isclose(
        model.layer_linear_params,
        48 * model.attention_params_per_layer
        + 24 * model.mlp_params_per_layer
        + 24 * model.moe.layer_params(2048, 3),
    )


def test_deepseek_reads_its_experts_and_latent_attention():
    """DeepSeek-V2-Lite: 15.7B with 2.4B active (the model card's figures; its active count
    leaves out the input embedding, a lookup), 64 routed experts and 2 shared, the first
    layer dense; MLA caches 512 + 64 elements a token and layer, whole on every GPU."""
    lite = scenario("deepseek-v2-lite", tensor_parallel=2).model
    moe, mla = lite.moe, lite.mla
    assert (moe.num_experts, moe.experts_per_token, moe.dense_layers) == (64, 6, 1)
    assert moe.shared_intermediate_size == 2 * 1408
    embedding = lite.vocab_size * lite.hidden_size
    assert abs((lite.active_params - embedding) / 1e9 - 2.4) < 0.1
    assert mla.cached_elements == 576 and mla.q_lora_rank is None
    assert lite.kv_bytes_per_token(1) == lite.kv_bytes_per_token(2) == 27 * 576 * 2
    mha = 2 * 27 * 16 * 128 * 2  # what K and V per head would take
    assert lite.kv_bytes_per_token(1) < mha / 7
    v3 = scenario("deepseek-v3", tensor_parallel=8, hardware="h200").model
    assert v3.dtype_bytes == 1  # its FP8 checkpoint (quantization_config)
    assert abs(v3.active_params / 1e9 - 37.6) < 0.1 and v3.moe.dense_layers == 3


def test_mla_decode_reads_the_latent_and_its_projections_are_priced():
    lite = analytic_executor(scenario("deepseek-v2-lite"))
    contexts = np.full(32, 2048)
    parts = lite.breakdown([], contexts)
    assert all(part >= 0 for part in parts)
    floor = lite.params.decode_attention_floor_s * 27
    latent = 27 * (32 * 2048 + 32 * lite.params.decode_seq_overhead_tokens) * 576 * 2
    assert (parts.decode_attention_s - floor) * lite.kernels._decode_bytes_s == pytest.approx(
        latent, rel=1e-6
    )
    ops = lite.layer_ops(64)
    # q (direct), kv_a, kv_b: three GEMMs, more than a plain q/k/v GEMM of the same heads
    assert ops["attn_pre_proj"] > 3 * lite.params.kernel_floor_s


def test_expert_parallel_waits_for_the_busiest_gpu():
    """Uniform routing's spread between ranks shrinks with the batch (1/sqrt(T)) and grows
    with the ranks; routing skew adds to it."""
    ep = analytic_executor(scenario("qwen3-30b-a3b", tensor_parallel=4, expert_parallel=True))
    loads = [ep.moe.busiest_rank_load(t) for t in (8, 64, 1024, 65536)]
    assert loads == sorted(loads, reverse=True) and loads[0] > 1.2 and loads[-1] < 1.01
    two = analytic_executor(scenario("qwen3-30b-a3b", tensor_parallel=2, expert_parallel=True))
    assert two.moe.busiest_rank_load(64) < ep.moe.busiest_rank_load(64)
    tp = analytic_executor(scenario("qwen3-30b-a3b", tensor_parallel=4))
    assert tp.moe.busiest_rank_load(64) == 1.0
    skewed = analytic_executor(
        scenario(
            "qwen3-30b-a3b",
            tensor_parallel=4,
            expert_parallel=True,
            cost_model={"params": {"moe_rank_imbalance": 1.56}},
        )
    )
    assert skewed.moe.busiest_rank_load(4096) == pytest.approx(
        ep.moe.busiest_rank_load(4096) + 1.56
    )
    prefill = [(0, 4096)], np.zeros(0, np.int64)
    assert skewed.breakdown(*prefill).linear_s > 1.5 * ep.breakdown(*prefill).linear_s


@pytest.mark.parametrize("tokens, ranks", [(16, 4), (256, 4), (256, 8), (2048, 2)])
def test_the_busiest_rank_matches_a_monte_carlo_of_uniform_routing(tokens, ranks):
    ep = analytic_executor(
        scenario("qwen3-30b-a3b", tensor_parallel=ranks, expert_parallel=True)
    ).moe
    rng = np.random.default_rng(1)
    ratios = []
    for _ in range(300):
        choice = np.argsort(rng.random((tokens, 128)), axis=1)[:, :8]
        per_rank = np.bincount((choice // (128 // ranks)).ravel(), minlength=ranks)
        ratios.append(per_rank.max() / per_rank.mean())
    assert ep.busiest_rank_load(tokens) == pytest.approx(np.mean(ratios), rel=0.03)


def test_a_calibration_for_a_moe_model_is_not_taken_for_its_dense_twin():
    from sim.costs.calibrated import model_shape_key

    moe = scenario("mixtral-8x7b", tensor_parallel=2).model
    twin = moe.model_copy(update={"moe": None})
    assert model_shape_key(moe) != model_shape_key(twin)
    assert model_shape_key(moe).endswith("-e8k2")


def test_list_models_shows_an_moe_models_active_size(capsys):
    assert main(["list", "models"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "mixtral-8x7b" in line)
    assert "46.7 B (12.9 B active, 8e top-2)" in row
