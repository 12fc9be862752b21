"""The profile-driven cost model on small profiles in Vidur's CSV layout, written here.

The profiles hold the analytic model's own per-operator times on a grid, so on the grid
the profile model must agree with the analytic one exactly; between grid points it
interpolates, and outside it falls back (and counts)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from sim.catalog.presets import HARDWARE_PRESETS, MODEL_PRESETS
from sim.cli import main
from sim.config.errors import ScenarioError
from sim.config.loader import validate_scenario
from sim.costs.analytic import AnalyticCostModel
from sim.costs.profile import ProfileCostModel
from sim.costs.vidur import DENSE_OPS, Grid2D, ProfileError, Table1D, load_vidur_profile

LLAMA = MODEL_PRESETS["llama-3-8b"]
A100 = HARDWARE_PRESETS["a100-80gb"]
TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
CONTEXTS = [128, 256, 512, 1024, 2048, 4096]
CHUNKS = [64, 128, 256, 512, 1024, 2048]
CACHED = [0, 512, 1024]
NO_DECODES = np.zeros(0, dtype=np.int64)
MODEL_DIR = "compute/a100/meta-llama/Meta-Llama-3-8B"


def write_csv(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def write_profile(root: Path, analytic: AnalyticCostModel, tp: int = 1) -> Path:
    """mlp.csv and attention.csv in Vidur's layout holding ``analytic``'s own times."""
    shape = {"n_head": 32, "n_kv_head": 8, "n_embd": 4096, "n_expanded_embd": 14336}
    mlp = []
    for tokens in TOKENS:
        ops = analytic.layer_ops(tokens)
        row = {f"time_stats.{op}.median": ops[op] * 1000 for op in DENSE_OPS}
        row["time_stats.emb.median"] = 0.0
        mlp.append(
            {
                **row,
                **shape,
                "use_gated_mlp": True,
                "vocab_size": 128256,
                "num_tokens": tokens,
                "num_tensor_parallel_workers": tp,
            }
        )
    attention = []
    base = {
        "n_embd": 4096,
        "n_q_head": 32,
        "n_kv_head": 8,
        "block_size": 16,
        "num_tensor_parallel_workers": tp,
        "max_model_len": 8192,
    }
    for cached in CACHED:
        for chunk in CHUNKS:
            prefill, _ = analytic.attention_layer([(cached, chunk)], 0, 0)
            attention.append(
                {
                    **base,
                    "batch_size": 1,
                    "prefill_chunk_size": chunk,
                    "kv_cache_size": cached,
                    "is_prefill": True,
                    "time_stats.attn_prefill.median": prefill * 1000,
                    "time_stats.attn_decode.median": "",
                    "time_stats.attn_kv_cache_save.median": 0.0,
                }
            )
    for batch in BATCHES:
        for context in CONTEXTS:
            _, decode = analytic.attention_layer([], batch, batch * context)
            attention.append(
                {
                    **base,
                    "batch_size": batch,
                    "prefill_chunk_size": 0,
                    "kv_cache_size": context,
                    "is_prefill": False,
                    "time_stats.attn_prefill.median": "",
                    "time_stats.attn_decode.median": decode * 1000,
                    "time_stats.attn_kv_cache_save.median": 0.0,
                }
            )
    write_csv(root / MODEL_DIR / "mlp.csv", mlp)
    write_csv(root / MODEL_DIR / "attention.csv", attention)
    return root


@pytest.fixture
def analytic() -> AnalyticCostModel:
    return AnalyticCostModel(LLAMA, A100)


@pytest.fixture
def profile_model(tmp_path, analytic) -> ProfileCostModel:
    root = write_profile(tmp_path / "profiling", analytic)
    profile = load_vidur_profile(
        root, model=LLAMA, tensor_parallel=1, device="a100", model_name="meta-llama/Meta-Llama-3-8B"
    )
    return ProfileCostModel(profile, analytic)


def test_on_the_grid_the_profile_gives_the_measured_times(profile_model, analytic):
    """Every part (the CPU overhead and LM head are the analytic ones, as the profile
    holds no CPU figures and never an LM head)."""
    for chunks, contexts in [
        ([(0, 512)], NO_DECODES),
        ([], np.full(64, 1024)),
        ([(512, 256)], np.full(128, 2048)),  # mixed: 256 + 128 tokens = 384, between grid
    ]:
        got, want = profile_model.breakdown(chunks, contexts), analytic.breakdown(chunks, contexts)
        assert got.prefill_attention_s == pytest.approx(want.prefill_attention_s)
        assert got.decode_attention_s == pytest.approx(want.decode_attention_s)
        assert got.lm_head_s == want.lm_head_s and got.cpu_s == want.cpu_s
    on_grid = profile_model.breakdown([(0, 512)], NO_DECODES)
    assert on_grid.linear_s == pytest.approx(analytic.breakdown([(0, 512)], NO_DECODES).linear_s)
    assert sum(profile_model.fallback_steps.values()) == 0


def test_between_grid_points_it_interpolates(profile_model, analytic):
    """384 tokens lie between the profiled 256 and 512: linear interpolation."""
    low, high = (
        analytic.breakdown([(0, 256)], NO_DECODES),
        analytic.breakdown([(0, 512)], NO_DECODES),
    )
    got = profile_model.breakdown([(0, 384)], NO_DECODES)
    assert got.linear_s == pytest.approx((low.linear_s + high.linear_s) / 2)
    # decodes at a mean context between 1024 and 2048, a batch between 64 and 128
    grid = profile_model.profile.decode_attention
    corners = [grid(b, c) for b in (64, 128) for c in (1024, 2048)]
    value = profile_model.breakdown([], np.full(96, 1536)).decode_attention_s / LLAMA.num_layers
    assert min(corners) < value < max(corners)
    assert value == pytest.approx(float(np.mean(corners)))


def test_outside_the_grid_the_analytic_model_answers_and_it_is_counted(profile_model, analytic):
    chunks = [(0, 3000)]  # 3000 prefill tokens: beyond 2048 in mlp.csv and attention.csv
    got, want = profile_model.breakdown(chunks, NO_DECODES), analytic.breakdown(chunks, NO_DECODES)
    assert got == want
    assert profile_model.fallback_steps["dense"] == 1
    assert profile_model.fallback_steps["prefill_attention"] == 1
    profile_model.breakdown([], np.full(4, 8000))  # contexts beyond 4096
    assert profile_model.fallback_steps["decode_attention"] == 1
    report = profile_model.report()
    assert report["steps"] == 2 and report["fallback_steps"]["dense"] == 1
    assert "cpu" in report["analytic_parts"] and "lm_head" in report["analytic_parts"]


def test_a_scenario_runs_on_a_profile_and_reports_fallbacks(tmp_path, analytic, capsys):
    write_profile(tmp_path / "profiling", analytic)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "model: llama-3-8b\nhardware: a100-80gb\n"
        "cost_model: {kind: profile, format: vidur, path: profiling}\n"
        "workload: {arrival: {kind: poisson, rate_rps: 5}, input: {kind: fixed, value: 3000},"
        " output: {kind: fixed, value: 8}}\n"
        "simulation: {num_requests: 20}\n"
    )
    assert main(["run", str(scenario), "--out", str(tmp_path / "run"), "--no-report"]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    report = summary["cost_model"]
    assert report["kind"] == "profile" and report["steps"] > 0
    assert report["fallback_steps"]["prefill_attention"] > 0  # 3000-token prompts
    assert "outside the profile" in capsys.readouterr().out


def test_profile_scenario_errors_are_one_line(tmp_path):
    base = {"model": "llama-3-8b", "hardware": "a100-80gb"}
    with pytest.raises(ScenarioError, match="cost_model.path: a profile cost model needs"):
        validate_scenario({**base, "cost_model": {"kind": "profile"}}, "s.yaml")
    with pytest.raises(ScenarioError, match="cost_model.path: directory not found: nowhere"):
        validate_scenario(
            {**base, "cost_model": {"kind": "profile", "path": "nowhere"}},
            "s.yaml",
            base_dir=tmp_path,
        )
    (tmp_path / "p").mkdir()
    l4 = {
        "model": "llama-3-8b",
        "hardware": "l4",
        "tensor_parallel": 1,
        "cache": {"num_blocks": 100},
        "cost_model": {"kind": "profile", "path": "p"},
    }
    with pytest.raises(ScenarioError, match="cost_model.device: no Vidur device name"):
        validate_scenario(l4, "s.yaml", base_dir=tmp_path)
    with pytest.raises(ScenarioError, match="format: expected 'vidur'"):
        validate_scenario(
            {**base, "cost_model": {"kind": "profile", "path": "p", "format": "splitwise"}},
            "s.yaml",
            base_dir=tmp_path,
        )


def test_unusable_profiles_are_one_line_errors(tmp_path, analytic):
    kwargs = {
        "model": LLAMA,
        "tensor_parallel": 1,
        "device": "a100",
        "model_name": "meta-llama/Meta-Llama-3-8B",
    }
    with pytest.raises(ProfileError, match="mlp.csv: not found"):
        load_vidur_profile(tmp_path, **kwargs)
    root = write_profile(tmp_path / "profiling", analytic)
    with pytest.raises(ProfileError, match="no model-shape rows for n_head=64"):
        load_vidur_profile(root, **{**kwargs, "model": MODEL_PRESETS["llama-3-70b"]})
    with pytest.raises(ProfileError, match="num_tensor_parallel_workers=2"):
        load_vidur_profile(root, **{**kwargs, "tensor_parallel": 2})
    mlp = root / MODEL_DIR / "mlp.csv"
    mlp.write_text("num_tokens,whatever\n1,2\n")
    with pytest.raises(ProfileError, match="missing column 'n_head'"):
        load_vidur_profile(root, **kwargs)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "model: llama-3-8b\nhardware: a100-80gb\ncost_model: {kind: profile, path: profiling}\n"
    )
    assert main(["run", str(scenario), "--out", str(tmp_path / "run")]) == 2


def test_tables_interpolate_inside_and_refuse_outside():
    table = Table1D.from_points([(1, 10.0), (3, 30.0), (3, 50.0)])  # median of duplicates
    assert table(2) == pytest.approx(25.0) and table(3) == 40.0
    assert table(0.5) is None and table(4) is None
    grid = Grid2D.from_points([(0, 0, 0.0), (2, 0, 2.0), (0, 2, 4.0), (2, 2, 6.0), (4, 0, 8.0)])
    assert grid(1, 1) == pytest.approx(3.0)
    assert grid(3, 1) is None  # the (4, 2) corner was never measured
    assert grid(-1, 0) is None


def test_a_profile_runs_counts_are_the_steps_that_ran(tmp_path, analytic):
    """Decode stretches are priced whole and cut at arrivals: the steps counted (and
    those outside the grid) are the steps of steps.csv, as stepping one at a time has
    them, never the steps priced and dropped."""
    write_profile(tmp_path / "profiling", analytic)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "model: llama-3-8b\nhardware: a100-80gb\n"
        "cost_model: {kind: profile, format: vidur, path: profiling}\n"
        "workload: {arrival: {kind: poisson, rate_rps: 2}, input: {kind: fixed, value: 500},"
        " output: {kind: uniform, min: 200, max: 5000}}\n"
        "simulation: {num_requests: 40}\n"
    )
    reports = []
    for mode in ([], ["--step-by-step"]):
        out = tmp_path / f"run{len(reports)}"
        assert main(["run", str(scenario), "--out", str(out), "--no-report", "--quiet", *mode]) == 0
        summary = json.loads((out / "summary.json").read_text())
        with open(out / "steps.csv", newline="") as f:
            assert summary["cost_model"]["steps"] == sum(1 for _ in csv.DictReader(f))
        reports.append(summary["cost_model"])
    assert reports[0]["fallback_steps"]["decode_attention"] > 0  # contexts beyond 4096
    assert reports[0] == reports[1]
