"""Hostile input to the surfaces added since 2026-12-05 (issue 51), through the real
command line: router params, offload tiers, sliding windows and their prefix-cache
retention. Each case must end in exit code 2, no traceback, one stderr line naming the
scenario file and the field, and nothing written (tests/adversarial/cli.py).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from tests.adversarial.cli import ROOT, TINY_SCENARIO, Build, one_line_error, run_cases

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
for _value in ("on", "yes", -1, 0, 1.5, "full", [128], NAN, True):
    scenario_case(
        f"sliding window {_value!r}",
        ["model.sliding_window"],
        model={"config": GPT_OSS, "sliding_window": _value},
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
