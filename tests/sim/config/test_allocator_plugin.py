"""``cache.allocator: module:Class`` / ``path/file.py:Class``: a user's allocator runs a
scenario, built with the same keyword arguments as ``pagesim check-allocator`` uses, and
what cannot be used is a one-line error naming the field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from sim.cli import main
from tests.sim.config.allocator_plugin import TracedBlockManager

REPO = Path(__file__).resolve().parents[3]
PLUGIN = "tests.sim.config.allocator_plugin"


def run(tmp_path: Path, scenario: str, *sets: str) -> tuple[int, Path]:
    out = tmp_path / "run"
    args = ["run", scenario, "--out", str(out), "--quiet", "--no-report"]
    for assignment in ("simulation.num_requests=60", *sets):
        args += ["--set", assignment]
    return main(args), out


def test_a_plugin_allocator_runs_a_scenario_end_to_end(tmp_path):
    TracedBlockManager.built.clear()
    tiny = str(REPO / "scenarios/tiny.yaml")
    code, plugged = run(tmp_path / "plugin", tiny, f"cache.allocator={PLUGIN}:TracedBlockManager")
    assert code == 0
    # 128 blocks less vLLM's null block (the default engine, vllm-v1, keeps it out)
    assert TracedBlockManager.built == [
        {"num_blocks": 127, "block_size": 16, "num_cpu_blocks": 0, "enable_prefix_caching": False}
    ]
    # It is the paged manager underneath: the run is the paged run, byte for byte.
    assert run(tmp_path / "paged", tiny)[0] == 0
    for name in ("requests.csv", "steps.csv"):
        assert (plugged / name).read_bytes() == (tmp_path / "paged" / "run" / name).read_bytes()


def test_a_plugin_file_beside_the_scenario_with_prefix_caching(tmp_path, monkeypatch):
    folder = tmp_path / "scenarios"
    folder.mkdir()
    shutil.copy(REPO / "tests/sim/config/allocator_plugin.py", folder / "my_allocator.py")
    raw = yaml.safe_load((REPO / "scenarios/tiny.yaml").read_text())
    raw["cache"].update(prefix_caching=True, allocator="my_allocator.py:TracedBlockManager")
    scenario = folder / "mine.yaml"
    scenario.write_text(yaml.safe_dump(raw))
    monkeypatch.chdir(tmp_path)  # the path resolves beside the scenario, not here
    assert run(tmp_path, str(scenario))[0] == 0


@pytest.mark.parametrize(
    ("allocator", "extra", "expected"),
    [
        ("missing.py:Nope", "", "cache.allocator: cannot load allocator class 'missing.py:Nope'"),
        (f"{PLUGIN}:Nope", "", "cache.allocator: cannot load allocator class"),
        (f"{PLUGIN}:NotAnAllocator", "", "is not a subclass of backend.base.Allocator"),
        (
            f"{PLUGIN}:WithoutPrefixCaching",
            "cache.prefix_caching=true",
            "cache.prefix_caching: prefix caching needs the paged allocator or a plug-in whose "
            "supports_prefix_caching is True",
        ),
        (
            f"{PLUGIN}:NeedsMoreArguments",
            "",
            "cache.allocator: cannot construct NeedsMoreArguments(num_blocks=127, block_size=16, "
            "num_cpu_blocks=0, enable_prefix_caching=False): TypeError",
        ),
    ],
)
def test_an_unusable_plugin_is_a_one_line_error(tmp_path, capsys, allocator, extra, expected):
    sets = [f"cache.allocator={allocator}"] + ([extra] if extra else [])
    code, _ = run(tmp_path, str(REPO / "scenarios/tiny.yaml"), *sets)
    err = capsys.readouterr().err
    assert code == 2 and expected in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


OFFLOAD = "scenarios/policies/offload-multi-turn.yaml"
WINDOWED = "scenarios/windows/gpt-oss-20b.yaml"


@pytest.mark.parametrize("scenario", [OFFLOAD, WINDOWED], ids=["offload tiers", "KV groups"])
def test_a_subclass_of_the_manager_gets_tiers_and_groups_as_the_manager_does(tmp_path, scenario):
    """The tiers are a connector beside the allocator, the groups the manager's own: a
    plug-in subclass runs them byte for byte as the shipped manager does."""
    path, sets = (
        str(REPO / scenario),
        ("simulation.num_requests=400", "simulation.warmup_requests=0"),
    )
    code, plugged = run(tmp_path / "plugin", path, f"cache.allocator={PLUGIN}:Mine", *sets)
    assert code == 0
    assert run(tmp_path / "paged", path, *sets)[0] == 0
    for name in ("requests.csv", "steps.csv"):
        assert (plugged / name).read_bytes() == (tmp_path / "paged" / "run" / name).read_bytes()
    summary = json.loads((plugged / "summary.json").read_text())
    if scenario == OFFLOAD:  # the tier served hits: the plug-in met the connector
        assert summary["kv_offload"]["tiers"][0]["hit_tokens"] > 0


@pytest.mark.parametrize(
    ("scenario", "allocator", "expected"),
    [
        (OFFLOAD, "WithoutConnector", "its supports_kv_connector is not True"),
        (OFFLOAD, "ConnectorWithoutSeam", "declares supports_kv_connector but lacks prompt_keys"),
        (OFFLOAD, "OldCanAllocate", "its can_allocate takes no external_blocks"),
        (WINDOWED, "WithoutGroups", "a plug-in whose supports_kv_groups is True"),
    ],
)
def test_a_plugin_without_a_capability_it_is_asked_for_is_one_line(
    tmp_path, capsys, scenario, allocator, expected
):
    code, _ = run(tmp_path, str(REPO / scenario), f"cache.allocator={PLUGIN}:{allocator}")
    err = capsys.readouterr().err
    assert code == 2 and expected in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
