"""An offload tier from a scenario (cache.offload): validated, built into the paged
manager, its moves in each step, its figures in summary.json."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.cli import main
from sim.config.loader import load_scenario
from sim.run.runner import simulate

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = str(ROOT / "scenarios" / "policies" / "offload-multi-turn.yaml")
SMALL = ["simulation.num_requests=300", "simulation.warmup_requests=20"]


def run(*overrides: str):
    return simulate(load_scenario(SCENARIO, overrides=[*SMALL, *overrides]))


def test_the_tier_serves_what_the_device_evicted_and_the_summary_says_so():
    tiered, alone = run(), run("cache.offload=[]")
    assert "kv_offload" not in alone.summary
    (tier,) = tiered.summary["kv_offload"]["tiers"]
    assert tier["tier"] == "cpu" and tier["capacity_blocks"] == 8192  # 16 GiB of 2 MiB
    assert tier["loaded_blocks"] > 0 and tier["hit_tokens"] == 16 * tier["loaded_blocks"]
    assert tier["stored_bytes"] == tier["stored_blocks"] * 16 * 128 * 1024  # bf16, 8 KV heads
    cached = [sum(o.cached_prompt_tokens for o in r.outcomes) for r in (tiered, alone)]
    assert cached[0] >= cached[1] + tier["hit_tokens"] // 2  # hits the device alone lost
    assert tiered.summary["prefix_hit_rate"] > alone.summary["prefix_hit_rate"]


def test_a_run_with_a_tier_is_the_same_twice():
    first, second = run(), run()
    assert first.summary == second.summary


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("cache.offload=[{tier: disk, num_blocks: 8}]", "disk and remote tiers are not modelled"),
        ("cache.offload=[{tier: cpu}]", "set capacity_gib or num_blocks"),
        ("cache.prefix_caching=false", "cache.offload: an offload tier needs cache.prefix_caching"),
        ("cache.allocator=contiguous-max", "prefix caching needs the paged allocator"),
        ("cache.offload=[{tier: cpu, num_blocks: 8, eviction: nope}]", "nope"),
        ("cache.offload=[{tier: cpu, capacity_gib: 0.001}]", "holds no block"),
    ],
)
def test_bad_tier_settings_are_one_line(tmp_path, capsys, override, message):
    code = main(["run", SCENARIO, "--set", override, "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_the_tables_show_the_tier_and_compare_keeps_rows_aligned_without_one():
    from sim.output.tables import compare_table, summary_rows

    tiered, alone = run().summary, run("cache.offload=[]").summary
    assert not any(label.startswith("offload") for label, _ in summary_rows(alone))
    rows = dict(summary_rows(tiered))
    served = tiered["kv_offload"]["tiers"][0]["hit_tokens"]
    assert rows["offload tier prompt tokens served"] == f"{served:,}"
    table = compare_table({"alone": alone, "tiered": tiered}).splitlines()
    line = next(row for row in table if row.startswith("offload tier prompt tokens served"))
    assert line.split()[-2:] == ["-", f"{served:,}"]
    hit = next(row for row in table if row.startswith("prefix hit rate %"))
    assert hit.split()[-2:] == [f"{100 * alone['prefix_hit_rate']:.1f}%",
                                f"{100 * tiered['prefix_hit_rate']:.1f}%"]  # fmt: skip
