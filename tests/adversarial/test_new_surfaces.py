"""Hostile input to the surfaces added since 2026-12-05 (issues 51-53), through the real
command line: router params, offload tiers, sliding windows and their prefix-cache
retention, prefill and decode pools. Each case must end in exit code 2, no traceback,
one stderr line naming the scenario file and the field, and nothing written
(tests/adversarial/cli.py).
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.adversarial.cli import (
    ROOT,
    TINY_SCENARIO,
    Build,
    one_line_error,
    run_cases,
    run_cli,
    snapshot,
)

GPT_OSS = str(ROOT / "scenarios" / "models" / "gpt-oss-20b.json")
NAN, INF = float("nan"), float("inf")

#: name -> build(folder) -> (command arguments, culprits the error line must name)
CASES: dict[str, Build] = {}


def scenario_case(name: str, culprits: list[str], **sections) -> None:
    """A case running TINY_SCENARIO with ``sections`` merged in (a dict updates the
    section, anything else replaces it), blamed on ``culprits`` and the file."""

    def build(folder: Path):
        raw = copy.deepcopy(TINY_SCENARIO)
        for key, value in sections.items():
            if isinstance(value, dict) and isinstance(raw.get(key), dict):
                raw[key].update(value)
            else:
                raw[key] = value
        (folder / "s.yaml").write_text(yaml.safe_dump(raw))
        argv = ["run", str(folder / "s.yaml"), "--out", str(folder / "out"), "--quiet"]
        return [*argv, "--no-report"], ["s.yaml", *culprits]

    CASES[name] = build


# -- routing.params of the cache-seeking routers -----------------------------------------
for _router in ("precise-prefix", "prefix-affinity"):
    for _param, _value in [
        ("load_cap", NAN),
        ("load_cap", INF),
        ("load_cap", -INF),
        ("load_cap", "x"),
        ("load_cap", True),
        ("load_cap", 0.5),
        ("slack", -1),
        ("slack", 1.5),
        ("slack", "x"),
        ("slack", NAN),
        ("slack", False),
        ("bogus", 1),
    ]:
        scenario_case(
            f"{_router} {_param} {_value!r}",
            ["routing.params", _param],
            routing={"replicas": 2, "router": _router, "params": {_param: _value}},
        )
for _value in (0, -3, NAN, "x", True, 2.5):
    scenario_case(
        f"prefix-affinity prefix_tokens {_value!r}",
        ["routing.params", "prefix_tokens"],
        routing={"replicas": 2, "router": "prefix-affinity", "params": {"prefix_tokens": _value}},
    )

# -- cache.offload -------------------------------------------------------------------------
CACHING = {"prefix_caching": True}
for _value in (INF, NAN, -1, 0, "x", True, False):
    scenario_case(
        f"offload capacity_gib {_value!r}",
        ["cache.offload", "capacity_gib"],
        cache={**CACHING, "offload": [{"tier": "cpu", "capacity_gib": _value}]},
    )
for _value in (0, -1, "x", True, 1.5):
    scenario_case(
        f"offload num_blocks {_value!r}",
        ["cache.offload", "num_blocks"],
        cache={**CACHING, "offload": [{"tier": "cpu", "num_blocks": _value}]},
    )
for _value in (1e30, 2**63):  # (the memory budget refuses them before anything runs)
    scenario_case(
        f"offload larger than memory {_value!r}",
        ["cache.offload"],
        cache={**CACHING, "offload": [{"tier": "cpu", "capacity_gib": _value}]},
    )
for _value in ("gpu", 1, None, "hbm"):
    scenario_case(
        f"offload tier {_value!r}",
        ["cache.offload", "tier"],
        cache={**CACHING, "offload": [{"tier": _value, "num_blocks": 8}]},
    )
scenario_case("offload not a list", ["cache.offload"], cache={**CACHING, "offload": "cpu"})
scenario_case(
    "offload eviction unknown",
    ["cache.offload", "eviction"],
    cache={**CACHING, "offload": [{"tier": "cpu", "num_blocks": 8, "eviction": "bogus"}]},
)
scenario_case(
    "offload without prefix caching",
    ["cache.offload"],
    cache={"prefix_caching": False, "offload": [{"tier": "cpu", "num_blocks": 8}]},
)
scenario_case(
    "offload both sizes",
    ["cache.offload"],
    cache={**CACHING, "offload": [{"tier": "cpu", "num_blocks": 8, "capacity_gib": 1}]},
)
scenario_case(
    "offload disk first",
    ["cache.offload"],
    cache={**CACHING, "offload": [{"tier": "disk", "num_blocks": 8}]},
)

# -- sliding windows and their retention -----------------------------------------------------
for _value in (-1, 3, "x", True, NAN, 1.5, "sparse", INF):
    scenario_case(
        f"retention interval {_value!r}",
        ["prefix_cache_retention_interval"],
        model={"config": GPT_OSS},
        cache={**CACHING, "prefix_cache_retention_interval": _value},
    )
scenario_case(
    "retention interval not a multiple of the block",
    ["prefix_cache_retention_interval", "multiple of cache.block_size"],
    model={"config": GPT_OSS},
    cache={**CACHING, "prefix_cache_retention_interval": 24},
)
scenario_case(
    "retention interval without a window",
    ["prefix_cache_retention_interval", "no sliding window"],
    cache={**CACHING, "prefix_cache_retention_interval": 32},
)
scenario_case(
    "layer_types one entry for 24 layers",
    ["model", "layer_types"],
    model={"config": GPT_OSS, "layer_types": ["full_attention"]},
)
scenario_case(
    "layer_types of an unknown kind",
    ["model.layer_types"],
    model={"config": GPT_OSS, "layer_types": ["local_attention"] * 24},
)
scenario_case(
    "round-robin given a load cap",
    ["routing.params", "load_cap"],
    routing={"replicas": 2, "router": "round-robin", "params": {"load_cap": 2}},
)
for _value in ("on", "yes", -1, 0, 1.5, "full", [128], NAN, True):
    scenario_case(
        f"sliding window {_value!r}",
        ["model.sliding_window"],
        model={"config": GPT_OSS, "sliding_window": _value},
    )


# -- model configs whose windows would never finish reading or building --------------------
def config_case(name: str, config: dict, culprits: list[str], **sections) -> None:
    """A case running a scenario whose model is ``config`` (a config.json), with
    ``sections`` (TINY_SCENARIO's cache and length of run by default)."""

    def build(folder: Path):
        (folder / "cfg.json").write_text(json.dumps(config))
        raw = {
            "model": {"config": "cfg.json"},
            "simulation": {"num_requests": 5},
            "cache": TINY_SCENARIO["cache"],
            **sections,
        }
        (folder / "s.yaml").write_text(yaml.safe_dump(raw))
        argv = ["run", str(folder / "s.yaml"), "--out", str(folder / "out"), "--quiet"]
        return [*argv, "--no-report"], ["s.yaml", *culprits]

    CASES[name] = build


_GEMMA = json.loads((ROOT / "scenarios" / "models" / "gemma-3-12b.json").read_text())
config_case(
    "gemma 3 with 2**31-1 layers",
    {**_GEMMA, "num_hidden_layers": 2**31 - 1},
    ["cfg.json", "num_hidden_layers"],
)
config_case(
    "a window pattern of 6 over 2**31-1 layers",
    {**_GEMMA, "num_hidden_layers": 2**31 - 1, "sliding_window_pattern": 6},
    ["cfg.json", "num_hidden_layers"],
)
_MANY_GROUPS = {
    **json.loads(Path(GPT_OSS).read_text()),
    "num_hidden_layers": 2000,
    "layer_types": ["full_attention"] + ["sliding_attention"] * 1999,
    "hidden_size": 64,
    "intermediate_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "vocab_size": 1000,
}
config_case(  # 2,000 KV cache groups over the blocks a whole H100 holds of so tiny a model
    "2,000 KV cache groups in all of memory",
    _MANY_GROUPS,
    ["cache.num_blocks", "memory"],
    cache={"block_size": 16},
)

# the window settings a config.json carries, as a model's own file could get them wrong
_OSS = json.loads(Path(GPT_OSS).read_text())
for _key, _value in [
    ("sliding_window", -128),
    ("sliding_window", "128"),
    ("sliding_window", 1.5),
    ("sliding_window", [128]),
    ("layer_types", "sliding_attention"),
    ("layer_types", [1] * 24),
    ("layer_types", ["sliding_attention"] * 23),
]:
    config_case(
        f"config.json {_key} {_value!r}"[:80],
        {**_OSS, _key: _value},
        ["cfg.json", _key],
    )
for _value in (0, -6, "6", 1.5):  # Gemma 3 reads its layout from the pattern (no layer_types)
    config_case(
        f"config.json sliding_window_pattern {_value!r}",
        {**_GEMMA, "sliding_window_pattern": _value},
        ["cfg.json", "sliding_window_pattern"],
    )
# two tiers of one kind, and an eviction policy named by what is not a name
scenario_case(
    "offload two cpu tiers",
    ["cache.offload", "cpu"],
    cache={**CACHING, "offload": [{"tier": "cpu", "num_blocks": 8}] * 2},
)
for _value in (1, None, ["lru"]):
    scenario_case(
        f"offload eviction {_value!r}",
        ["cache.offload", "eviction"],
        cache={**CACHING, "offload": [{"tier": "cpu", "num_blocks": 8, "eviction": _value}]},
    )

# -- plug-in allocators declaring capabilities -----------------------------------------------
PLUGINS = """
from backend.blocks import BlockManager
from backend.contiguous import ContiguousAllocator


class Subclass(BlockManager):
    pass


class CapabilityAsText(BlockManager):
    supports_kv_groups = "no"


class OffloadAsNumber(BlockManager):
    supports_kv_connector = 1


class ContiguousClaimingGroups(ContiguousAllocator):
    supports_kv_groups = True
"""
WINDOWED = {"model": {"config": GPT_OSS}, "cache": {"block_size": 16, "num_blocks": 256}}
OFFLOADED = {"cache": {**TINY_SCENARIO["cache"], **CACHING, "offload": [{"num_blocks": 64}]}}


def plugin_scenario(folder: Path, allocator: str, sections: dict) -> list[str]:
    """``pagesim run`` of TINY_SCENARIO with ``sections`` and the plug-in ``allocator``
    (``PLUGINS`` written beside it as plugins.py)."""
    (folder / "plugins.py").write_text(PLUGINS)
    raw = copy.deepcopy(TINY_SCENARIO)
    raw.update(copy.deepcopy(sections))
    raw["cache"]["allocator"] = allocator
    (folder / "s.yaml").write_text(yaml.safe_dump(raw))
    return ["run", str(folder / "s.yaml"), "--out", str(folder / "out"), "--quiet", "--no-report"]


def plugin_case(name: str, allocator: str, sections: dict, culprits: list[str]) -> None:
    def build(folder: Path):
        return plugin_scenario(folder, allocator, sections), ["s.yaml", *culprits]

    CASES[name] = build


for _label, _sections in (("windows", WINDOWED), ("an offload tier", OFFLOADED)):
    plugin_case(
        f"a capability written as a text, under {_label}",
        "plugins.py:CapabilityAsText",
        _sections,
        ["cache.allocator", "supports_kv_groups", "True or False"],
    )
    plugin_case(
        f"a capability written as a number, under {_label}",
        "plugins.py:OffloadAsNumber",
        _sections,
        ["cache.allocator", "supports_kv_connector", "True or False"],
    )
plugin_case(
    "a contiguous allocator claiming KV cache groups",
    "plugins.py:ContiguousClaimingGroups",
    WINDOWED,
    ["cache.allocator", "cannot construct ContiguousClaimingGroups("],
)


# -- prefill and decode pools (routing.disaggregation) ----------------------------------------
def _pools(**split) -> dict:
    return {"disaggregation": {"prefill": {"replicas": 1}, "decode": {"replicas": 1}, **split}}


for _value in (0, -1, "x", True, 1.5, NAN, INF):
    scenario_case(
        f"prefill replicas {_value!r}",
        ["routing.disaggregation.prefill.replicas"],
        routing=_pools(prefill={"replicas": _value}),
    )
for _value in ("carrier-pigeon", 1, None, True):
    scenario_case(f"link {_value!r}", ["routing.disaggregation.link"], routing=_pools(link=_value))
for _value in (-1, "x", True, NAN, INF, 1.5):
    scenario_case(
        f"decider threshold {_value!r}",
        ["routing.disaggregation.threshold"],
        routing=_pools(decider="prefix-aware", threshold=_value),
    )
for _field, _value in [
    ("hardware", "h999"),
    ("tensor_parallel", 3),
    ("tensor_parallel", NAN),
    ("cache", {"num_blocks": 0}),
    ("cache", {"block_size": "x"}),
    ("scheduler", {"max_num_seqs": True}),
    ("router", "nope"),
    ("cache", "big"),
    ("nonsense", 1),
]:
    scenario_case(
        f"decode pool {_field} {_value!r}",
        ["routing.disaggregation.decode"],
        routing=_pools(decode={"replicas": 1, _field: _value}),
    )
scenario_case("pools not a mapping", ["routing.disaggregation"], routing={"disaggregation": "1P1D"})
scenario_case("replicas beside pools", ["routing.replicas"], routing={**_pools(), "replicas": 2})
scenario_case(
    "pools with a contiguous allocator",
    ["cache.allocator", "paged"],
    routing=_pools(),
    cache={"allocator": "contiguous-max"},
)


# ---------------------------------------------------------------------------- tests
@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Every case built in its own folder and run, all at once (run_cases)."""
    return run_cases(CASES, lambda: tmp_path_factory.mktemp("surface"))


@pytest.mark.parametrize("name", list(CASES))
def test_a_hostile_value_is_one_line_exit_2_and_writes_nothing(results, name):
    outcome = results[name]
    assert one_line_error(outcome.result, *outcome.culprits) == ""
    assert outcome.after == outcome.before, "the failed command created, changed or removed files"


# -- compare of runs whose summary.json lies about its offload tiers -------------------------
@pytest.fixture(scope="module")
def a_run(tmp_path_factory) -> Path:
    """A finished run of TINY_SCENARIO (prefix caching, a CPU tier), to copy and break."""
    folder = tmp_path_factory.mktemp("run")
    raw = copy.deepcopy(TINY_SCENARIO)
    raw["cache"].update(prefix_caching=True, offload=[{"tier": "cpu", "num_blocks": 64}])
    (folder / "s.yaml").write_text(yaml.safe_dump(raw))
    result = run_cli(["run", str(folder / "s.yaml"), "--out", str(folder / "out"), "--quiet"])
    assert result.returncode == 0, result.describe()
    return folder / "out"


@pytest.mark.parametrize(
    "offload, culprit",
    [
        ("lots", "kv_offload"),
        ({"tiers": "cpu"}, "kv_offload.tiers"),
        ({"tiers": [1]}, "kv_offload.tiers[0]"),
        ({"tiers": [{"hit_tokens": 3}]}, "kv_offload.tiers[0]"),
        ({"tiers": [{"tier": "cpu", "hit_tokens": "many"}]}, "kv_offload.tiers[0].hit_tokens"),
        ({"tiers": [{"tier": "cpu", "loaded_bytes": True}]}, "kv_offload.tiers[0].loaded_bytes"),
    ],
)
def test_compare_refuses_a_summary_whose_offload_block_lies(a_run, tmp_path, offload, culprit):
    broken = tmp_path / "broken"
    shutil.copytree(a_run, broken)
    summary = json.loads((broken / "summary.json").read_text())
    summary["kv_offload"] = offload
    (broken / "summary.json").write_text(json.dumps(summary))
    before = snapshot(tmp_path)
    result = run_cli(["compare", str(a_run), str(broken)])
    assert one_line_error(result, "summary.json", culprit) == ""
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("allocator", ["backend.blocks:BlockManager", "plugins.py:Subclass"])
@pytest.mark.parametrize("sections", [WINDOWED, OFFLOADED], ids=["windows", "offload"])
def test_the_shipped_manager_as_a_plug_in_runs_with_what_it_declares(tmp_path, allocator, sections):
    """The shipped manager (or a subclass) named as a plug-in declares KV cache groups and
    offload tiers: a windowed model or an offload tier runs on it as on ``paged``."""
    result = run_cli(plugin_scenario(tmp_path, allocator, sections))
    assert result.returncode == 0, result.describe()
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["num_finished"] > 0
