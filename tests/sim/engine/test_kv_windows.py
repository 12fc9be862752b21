"""Models whose layers keep different KV (sim/catalog/kv_layout.py): the KV cache groups
read from a config.json, the pool they size, what a scenario refuses with them, and a
run with and without the windows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from backend.base import KVGroup
from sim.catalog.kv_layout import kv_layout
from sim.cli import main
from sim.config.errors import ScenarioError
from sim.config.loader import apply_override, validate_scenario
from sim.costs.analytic import AnalyticCostModel
from sim.costs.kernels import capped_sum
from sim.run.build import analytic_executor

ROOT = Path(__file__).resolve().parents[3]
MODELS = ROOT / "scenarios" / "models"
GPT_OSS = json.loads((MODELS / "gpt-oss-20b.json").read_text())

FULL, SLIDING_128 = KVGroup(), KVGroup(128)


def model_of(config: str | dict, tmp_path: Path, **fields):
    if isinstance(config, dict):
        (tmp_path / "cfg.json").write_text(json.dumps(config))
        config = "cfg.json"
    raw = {"model": {"config": config, **fields}, "cache": {"num_blocks": 64}}
    return validate_scenario(raw, "s.yaml", base_dir=tmp_path).model


# -- grouping, as vLLM groups layers ---------------------------------------------------------
@pytest.mark.parametrize(
    "windows, groups, size",
    [
        ([None] * 4, (FULL,), 4),
        ([4096] * 32, (KVGroup(4096),), 32),  # Mistral-7B-v0.1: one group of windows
        ([128, None] * 12, (SLIDING_128, FULL), 12),  # gpt-oss: 1:1
        (([1024] * 5 + [None]) * 8, (KVGroup(1024),) * 5 + (FULL,), 8),  # Gemma 3: 5:1
        # vLLM's own examples: 10 full + 20 windows -> 3 groups of 10; 12 + 13 -> 13 each
        ([None] * 10 + [64] * 20, (FULL, KVGroup(64), KVGroup(64)), 10),
        ([64] * 12 + [None] * 13, (KVGroup(64), FULL), 13),
        ([None, 64, 64, 64, 64, 64, 64], (FULL,) + (KVGroup(64),) * 6, 1),  # 1:6, padding 0
        ([None] * 4 + [64] * 5, (FULL, KVGroup(64)), 5),  # 5 < 1.5 x 4: groups of 5, one padded
        ([None] * 2 + [64] * 3, (FULL, KVGroup(64), KVGroup(64)), 2),  # 3 is 1.5 x 2: of 2
    ],
)
def test_layers_are_grouped_as_vllm_groups_them(windows, groups, size):
    kinds: dict = {}
    for window in windows:
        kinds[window] = kinds.get(window, 0) + 1
    layout = kv_layout(tuple(kinds.items()))
    assert layout.groups == groups and layout.layers_per_group == size
    assert layout.is_plain == (groups == (FULL,))


def test_the_shipped_configs_give_their_groups(tmp_path):
    models = ROOT / "scenarios" / "models"
    oss = model_of(str(models / "gpt-oss-20b.json"), tmp_path)
    assert oss.kv_layout.groups == (SLIDING_128, FULL) and oss.kv_layout.layers_per_group == 12
    assert oss.moe.num_experts == 32 and oss.moe.expert_weight_bits == 4.25
    # the MXFP4 checkpoint: 12.8 GiB (OpenAI's model card: "runs within 16GB of memory")
    assert 13.5e9 < oss.weight_bytes < 14.0e9
    gemma = model_of(str(models / "gemma-3-12b.json"), tmp_path)
    assert gemma.kv_layout.groups == (KVGroup(1024),) * 5 + (FULL,)
    assert (
        gemma.layer_types[5] == "full_attention"
        and gemma.layer_types[:5] == ("sliding_attention",) * 5
    )
    mistral = model_of(str(models / "mistral-7b.json"), tmp_path)
    assert mistral.kv_layout.groups == (KVGroup(4096),)


def test_a_block_holds_one_groups_layers_and_windows_off_hold_them_all(tmp_path):
    on = model_of(GPT_OSS, tmp_path)
    off = model_of(GPT_OSS, tmp_path, sliding_window="off")
    per_layer = 2 * 8 * 64 * 2  # K and V, 8 KV heads of 64, bf16
    assert on.kv_block_bytes(16) == 16 * 12 * per_layer
    assert off.kv_block_bytes(16) == 16 * 24 * per_layer and off.kv_layout.is_plain
    assert on.kv_bytes_per_token() == off.kv_bytes_per_token() == 24 * per_layer


@pytest.mark.parametrize(
    "change, field, message",
    [
        ({"sliding_window": 0}, "model.config", "sliding_window: expected a positive integer"),
        (
            {"layer_types": ["full_attention"] * 3},
            "model.config",
            "layer_types: 3 entries; num_hidden_layers is 24",
        ),
        ({"layer_types": ["local"] * 24}, "model.config", "layer_types: expected a list of"),
        ({"attention_chunk_size": 8192}, "model.config", "chunked local attention (Llama 4)"),
    ],
)
def test_bad_group_settings_in_a_config_are_one_line(tmp_path, change, field, message):
    with pytest.raises(ScenarioError) as err:
        model_of({**GPT_OSS, **change}, tmp_path)
    text = str(err.value)
    assert text.startswith(f"s.yaml: {field}: ") and message in text and "\n" not in text


def test_llama_4_scout_is_refused_by_name(tmp_path):
    scout = str(MODELS / "unsupported" / "llama-4-scout.json")
    with pytest.raises(ScenarioError) as err:
        model_of(scout, tmp_path)
    assert "attention_chunk_size: chunked local attention (Llama 4) is not modelled" in str(
        err.value
    )


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"sliding_window": 0}, "model.sliding_window"),
        ({"sliding_window": "on"}, "model.sliding_window"),
        ({"layer_types": ["full_attention"]}, "layer_types has 1 entries; num_layers is 24"),
    ],
)
def test_bad_group_settings_beside_a_config_are_one_line(tmp_path, fields, message):
    with pytest.raises(ScenarioError) as err:
        model_of(GPT_OSS, tmp_path, **fields)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "cache, field",
    [
        ({"allocator": "contiguous-max"}, "cache.allocator"),
        ({"cpu_swap_gib": 4}, "cache.cpu_swap_gib"),
    ],
)
def test_what_does_not_keep_groups_yet_is_refused_by_name(tmp_path, cache, field):
    (tmp_path / "cfg.json").write_text(json.dumps(GPT_OSS))
    raw = {"model": {"config": "cfg.json"}, "cache": {"num_blocks": 64, **cache}}
    with pytest.raises(ScenarioError, match=f"{field}: 'cfg' keeps 2 KV cache groups of 12 layers"):
        validate_scenario(raw, "s.yaml", base_dir=tmp_path)
    raw["model"]["sliding_window"] = "off"  # the way round it, as the message says
    validate_scenario(raw, "s.yaml", base_dir=tmp_path)


def test_offload_tiers_are_taken_beside_the_groups(tmp_path):
    (tmp_path / "cfg.json").write_text(json.dumps(GPT_OSS))
    tier = {"prefix_caching": True, "offload": [{"tier": "cpu", "capacity_gib": 4}]}
    raw = {"model": {"config": "cfg.json"}, "cache": {"num_blocks": 64, **tier}}
    scenario = validate_scenario(raw, "s.yaml", base_dir=tmp_path)
    assert len(scenario.model.kv_layout.groups) == 2 and scenario.kv_pool.offload_blocks


def test_a_cost_model_that_does_not_price_windows_is_refused(tmp_path):
    profile = {
        "kind": "profile",
        "path": ".",
        "device": "h100",
        "profile_model": "m",
        "network": "n",
    }
    raw = {"model": "mistral-7b", "cost_model": profile}
    message = "cost_model.kind: 'mistral-7b' keeps 1 KV cache group of 32 layers"
    with pytest.raises(ScenarioError, match=message):
        validate_scenario(raw, "s.yaml", base_dir=tmp_path)


def test_windows_hold_more_of_a_long_sequence_in_the_same_memory(tmp_path):
    """The same load on gpt-oss-20b in the same memory, windows on and off: a block of
    the windowed model holds half the layers, so the pool has twice the blocks; a
    sequence of 6,200 tokens holds 388 blocks in the full group and at most 9 in the
    window's, so about twice as many sequences run at once and the queue drains
    sooner."""
    peaks = {}
    for window in ("on", "off"):
        model = {"config": str(MODELS / "gpt-oss-20b.json"), "max_model_len": 16384}
        if window == "off":
            model["sliding_window"] = "off"
        raw = {
            "name": window,
            "model": model,
            "hardware": "h100-sxm",
            # (a pool sized from memory: 17.6 GB of the card, 13.7 GB of it weights)
            "cache": {"gpu_memory_utilization": 0.22},
            "workload": {
                "arrival": {"kind": "poisson", "rate_rps": 30},
                "input": {"kind": "fixed", "value": 6000},
                "output": {"kind": "fixed", "value": 200},
            },
            "simulation": {"num_requests": 60, "seed": 0},
        }
        path = tmp_path / f"{window}.yaml"
        path.write_text(yaml.safe_dump(raw))
        out = tmp_path / window
        assert main(["run", str(path), "--out", str(out), "--quiet", "--no-report"]) == 0
        summary = json.loads((out / "summary.json").read_text())
        peaks[window] = summary
    on, off = peaks["on"], peaks["off"]
    assert on["num_blocks"] in (2 * off["num_blocks"], 2 * off["num_blocks"] + 1)
    assert on["mean_batch_size"] > 1.5 * off["mean_batch_size"]
    assert on["ttft_s"]["p99"] < off["ttft_s"]["p99"]


# -- what attention costs with windows --------------------------------------------------------
def test_capped_sum_is_the_sum_it_names():
    for low in range(0, 6):
        for high in range(low - 2, 12):
            for cap in range(0, 14):
                want = sum(min(x, cap) for x in range(low, high + 1))
                assert capped_sum(low, high, cap) == want, (low, high, cap)


def analytic(tmp_path, **fields) -> AnalyticCostModel:
    (tmp_path / "cfg.json").write_text(json.dumps(GPT_OSS))
    raw = {"model": {"config": "cfg.json", **fields}, "cache": {"num_blocks": 64}}
    return analytic_executor(validate_scenario(raw, "s.yaml", base_dir=tmp_path))


def test_a_window_reads_at_most_its_tokens(tmp_path):
    on, off = analytic(tmp_path), analytic(tmp_path, sliding_window="off")
    short = np.full(8, 100, np.int64)  # within the 128-token window: the same reads
    assert on.breakdown([], short).decode_attention_s == off.breakdown([], short).decode_attention_s
    long = np.full(8, 20_000, np.int64)  # half the layers read 128 tokens, not 20,000
    ratio = on.breakdown([], long).decode_attention_s / off.breakdown([], long).decode_attention_s
    assert 0.5 < ratio < 0.56  # (each layer also pays its kernel floor)
    chunk = [(16_000, 2048)]
    assert on.breakdown(chunk, short[:0]).prefill_attention_s < 0.6 * (
        off.breakdown(chunk, short[:0]).prefill_attention_s
    )
    assert on.breakdown([(0, 100)], short[:0]) == off.breakdown([(0, 100)], short[:0])


def test_a_decode_stretch_is_its_steps_bit_for_bit(tmp_path):
    model = analytic(tmp_path)
    lens = np.array([5, 120, 127, 128, 129, 3000], np.int64)
    steps = model.decode_steps(lens, 40)
    assert [float(s) for s in steps] == [model.predict([], lens + i) for i in range(40)]


def test_a_request_a_window_lets_fit_is_served_not_rejected(tmp_path):
    """Gemma 3 12B, 8,000-token prompts on a pool of 1,500 blocks: counted as six groups
    holding every block (6 x 507) the request would never fit, but a window holds at
    most its 1,024 tokens, a step's 2,048 and a block (193 blocks), so the request peaks
    at 507 + 5 x 193 = 1,472 blocks and is served, as vLLM serves it (issue 50, B)."""
    raw = {
        "name": "gemma-long",
        "model": {"config": str(MODELS / "gemma-3-12b.json"), "max_model_len": 16384},
        "hardware": "h100-sxm",
        "cache": {"num_blocks": 1500, "prefix_caching": True},
        "scheduler": {"engine": "vllm-v1", "max_num_batched_tokens": 2048},
        "workload": {
            "arrival": {"kind": "poisson", "rate_rps": 2},
            "input": {"kind": "fixed", "value": 8000},
            "output": {"kind": "fixed", "value": 100},
        },
        "simulation": {"num_requests": 6, "seed": 0},
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet", "--no-report"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["num_rejected"], summary["num_finished"]) == (0, 6), summary


@pytest.mark.parametrize(
    "value, retention, error",
    [
        ("0", 0, None),
        ("dense", None, None),
        ("64", 64, None),
        ("24", None, "multiple of cache.block_size (16), got 24"),
        ("-16", None, "expected 0, a positive multiple of block_size or 'dense'"),
    ],
)
def test_retention_interval_as_a_scenario_writes_it(tmp_path, value, retention, error):
    """``cache.prefix_cache_retention_interval`` read from YAML text, as a user writes it:
    vLLM's default 0, ``dense``, a multiple of the block size; anything else is one line
    naming the field. The windows of the built allocator get it."""
    text = (
        f"model: {{config: {MODELS / 'gpt-oss-20b.json'}, max_model_len: 4096}}\n"
        f"cache: {{num_blocks: 256, prefix_caching: true, "
        f"prefix_cache_retention_interval: {value}}}\n"
    )
    path = tmp_path / "s.yaml"
    path.write_text(text)
    if error is not None:
        with pytest.raises(ScenarioError, match="prefix_cache_retention_interval") as caught:
            validate_scenario(yaml.safe_load(text), str(path), base_dir=tmp_path)
        assert error in str(caught.value) and "\n" not in str(caught.value)
        return
    scenario = validate_scenario(yaml.safe_load(text), str(path), base_dir=tmp_path)
    from sim.run.build import _groups

    windows = [g for g in _groups(scenario)["kv_groups"] if g.sliding_window is not None]
    assert windows and all(g.retention_interval == retention for g in windows)


def test_a_retention_interval_without_a_window_is_refused(tmp_path):
    raw = {
        "model": "llama-3-8b",
        "cache": {"num_blocks": 64, "prefix_cache_retention_interval": 32},
    }
    with pytest.raises(ScenarioError, match="no sliding window to apply it to"):
        validate_scenario(raw, "s.yaml", base_dir=tmp_path)


def test_a_window_keeps_only_the_tails_a_later_request_resumes_at():
    """Block arithmetic of sparse retention (vLLM's reachable_block_mask): a 64-token
    window needs 4 blocks of 16 before a hit; a 1,000-token prompt keeps blocks 58-61
    (its last boundary is 62: (1000 - 1) // 16) and, with a 512-token shared prefix,
    28-31; an interval of 256 also keeps the 4 blocks before every 16th."""
    from backend.blocks.block_pool import BlockPool
    from backend.blocks.prefix_index import PrefixIndex
    from backend.blocks.sliding_window import SlidingWindow
    from backend.evictor import LeastRecentlyUsed

    slots = np.zeros((8, 16), np.int32)
    index = PrefixIndex(slots, enabled=True)
    pool = BlockPool(8, 16, LeastRecentlyUsed(), index)

    def kept(interval, shared):
        window = SlidingWindow(
            pool, index, slots, window=64, prefix_caching=True, retention_interval=interval
        )
        keep = window.retained(1000, shared)
        return None if keep is None else [p for p in range(70) if keep(p)]

    assert kept(None, 0) is None
    assert kept(0, 0) == [58, 59, 60, 61]
    assert kept(0, 512) == [28, 29, 30, 31, 58, 59, 60, 61]
    every = [12, 13, 14, 15, 28, 29, 30, 31, 44, 45, 46, 47, 60, 61, 62, 63]
    assert kept(256, 0) == sorted(set(every) | {58, 59})
    assert kept(64, 0) is None  # every block is before some multiple of the interval


def test_the_documented_off_reads_as_yaml_writes_it(tmp_path):
    # docs/windows.md and the gpt-oss scenario write ``model.sliding_window: off``, which
    # YAML reads as false: it must switch the windows off, in a file and with --set.
    (tmp_path / "cfg.json").write_text((MODELS / "gpt-oss-20b.json").read_text())
    text = "model:\n  config: cfg.json\n  sliding_window: off\ncache:\n  num_blocks: 64\n"
    raw = yaml.safe_load(text)
    assert raw["model"]["sliding_window"] is False
    model = validate_scenario(raw, "s.yaml", base_dir=tmp_path).model
    assert model.sliding_window == "off" and model.kv_layout.is_plain
    raw = yaml.safe_load(text.replace("  sliding_window: off\n", ""))
    apply_override(raw, "model.sliding_window=off", "s.yaml")
    model = validate_scenario(raw, "s.yaml", base_dir=tmp_path).model
    assert model.sliding_window == "off" and model.kv_layout.is_plain


@pytest.mark.parametrize("value", ["on", "yes", -1, 0, 1.5, "full"])
def test_a_window_that_is_not_one_names_what_is_accepted(tmp_path, value):
    with pytest.raises(ScenarioError) as caught:
        model_of(GPT_OSS, tmp_path, sliding_window=yaml.safe_load(str(value)))
    message = str(caught.value)
    assert "model.sliding_window" in message and "off, or null" in message
    assert "+1 more" not in message and "constrained" not in message and "\n" not in message
