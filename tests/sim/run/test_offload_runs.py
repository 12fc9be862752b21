"""An offload tier from a scenario (cache.offload): validated, built into the paged
manager, its moves in each step, its figures in summary.json."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.cli import main
from sim.config.errors import ScenarioError
from sim.config.loader import load_scenario
from sim.run.runner import simulate

ROOT = Path(__file__).resolve().parents[3]
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
        ("cache.offload=[{tier: disk, num_blocks: 8}]", "the first tier is 'cpu'"),
        ("cache.offload=[{tier: nvme, num_blocks: 8}]", "expected one of 'cpu', 'disk', 'remote'"),
        (
            "cache.offload=[{tier: cpu, num_blocks: 8}, {tier: disk, num_blocks: 8}, "
            "{tier: cpu, num_blocks: 8}]",
            "each tier once, nearest the GPU first",
        ),
        ("cache.offload=[{tier: cpu, num_blocks: 8}, {tier: disk}]", "set capacity_gib"),
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
    assert not any(" tier " in label for label, _ in summary_rows(alone))
    rows = dict(summary_rows(tiered))
    served = tiered["kv_offload"]["tiers"][0]["hit_tokens"]
    assert rows["cpu tier prompt tokens served"] == f"{served:,}"
    table = compare_table({"alone": alone, "tiered": tiered}).splitlines()
    line = next(row for row in table if row.startswith("cpu tier prompt tokens served"))
    assert line.split()[-2:] == ["-", f"{served:,}"]
    hit = next(row for row in table if row.startswith("prefix hit rate %"))
    assert hit.split()[-2:] == [
        f"{100 * alone['prefix_hit_rate']:.1f}%",
        f"{100 * tiered['prefix_hit_rate']:.1f}%",
    ]


DISK = "cache.offload=[{tier: cpu, num_blocks: 512}, {tier: disk, capacity_gib: 64}]"


def test_a_disk_tier_below_a_small_cpu_tier_serves_what_both_lost_and_costs_its_reads():
    disk, cpu_only = run(DISK), run("cache.offload=[{tier: cpu, num_blocks: 512}]")
    cpu, below = disk.summary["kv_offload"]["tiers"]
    assert (cpu["tier"], below["tier"]) == ("cpu", "disk")
    assert below["capacity_blocks"] == 32 * 1024  # 64 GiB of 2 MiB
    assert below["hit_tokens"] > 0 and below["stored_blocks"] > 0
    assert below["stored_blocks"] <= cpu["stored_blocks"]  # every one cascaded from the CPU
    cached = [sum(o.cached_prompt_tokens for o in r.outcomes) for r in (disk, cpu_only)]
    assert cached[0] > cached[1]


def test_the_run_summary_names_each_tier_and_what_it_served():
    from sim.output.tables import format_summary_table as summary_text

    result = run(DISK)
    cpu, disk = result.summary["kv_offload"]["tiers"]
    text = summary_text(result.summary)
    for tier in (cpu, disk):
        line = next(row for row in text.splitlines() if row.startswith(f"{tier['tier']} tier "))
        assert f"{tier['hit_tokens']:,} prompt tokens served" in line
        assert f"{tier['evicted_blocks']:,} blocks evicted" in line
    assert "tier" not in summary_text(run("cache.offload=[]").summary)


def test_a_disk_tier_with_a_calibration_is_refused_in_one_line(tmp_path, capsys):
    from tests.sim.costs.test_calibration import calibration_text

    (tmp_path / "c.json").write_text(calibration_text())
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "model: tiny\ncache: {num_blocks: 64, prefix_caching: true, offload: "
        "[{tier: cpu, num_blocks: 8}, {tier: disk, num_blocks: 64}]}\n"
        "simulation: {num_requests: 4}\ncost_model: {kind: calibrated, file: c.json}\n"
    )
    code = main(["run", str(scenario), "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "a calibration has no disk or network link" in err
    assert len(err.splitlines()) == 1


ROUTING = str(ROOT / "scenarios" / "policies" / "routing-multi-turn.yaml")
REMOTE = "cache.offload=[{tier: cpu, capacity_gib: 4}, {tier: remote, capacity_gib: 64}]"


def test_a_remote_tier_is_one_store_the_replicas_share_and_the_summary_counts_once():
    scenario = load_scenario(ROUTING, overrides=[*SMALL, REMOTE, "routing.router=round-robin"])
    result = simulate(scenario)
    cpu, remote = result.summary["kv_offload"]["tiers"]
    assert scenario.routing.replicas > 1 and remote["tier"] == "remote"
    assert remote["capacity_blocks"] == 32 * 1024  # the cluster's 64 GiB of 2 MiB blocks
    # Round-robin scatters a session's turns: what one replica stored, another reads.
    assert remote["hit_tokens"] > 0
    assert remote["stored_blocks"] <= cpu["stored_blocks"]  # once, whoever stored first


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("backend.kind=torch", "needs backend.kind: model"),
        ("cache.allocator=contiguous-max", "prefix caching needs the paged allocator"),
    ],
)
def test_a_remote_tier_that_cannot_be_shared_is_one_line(tmp_path, capsys, override, message):
    args = ["run", ROUTING, "--set", REMOTE, "--set", override, "--out", str(tmp_path / "o")]
    code = main([*args, "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.splitlines()) == 1, err


def test_the_memory_estimate_counts_a_cluster_wide_tier_once(monkeypatch):
    """40M blocks of bookkeeping (128 B each) is 5 GB once, 20 GB per replica on 4."""
    monkeypatch.setenv("PAGESIM_MEMORY_BUDGET_GB", "10")

    def tiers(lower: str) -> list[str]:
        below = f"{{tier: {lower}, num_blocks: 40000000}}"
        return [f"cache.offload=[{{tier: cpu, num_blocks: 8}}, {below}]"]

    load_scenario(ROUTING, overrides=tiers("remote"))
    with pytest.raises(ScenarioError, match="cache.offload"):
        load_scenario(ROUTING, overrides=tiers("disk"))


GPT_OSS = "model={config: ../models/gpt-oss-20b.json}"  # 12 full layers, 12 of a 128-token window


def test_a_model_with_sliding_windows_keeps_a_tier_beside_its_kv_groups():
    """vLLM 0.33's offloading connector works with the hybrid KV cache manager
    (SupportsHMA): every group's blocks are written through, and a hit loads full
    attention's whole run but only the 8 blocks a 128-token window reads before it."""
    tiered, alone = run(GPT_OSS), run(GPT_OSS, "cache.offload=[]")
    (tier,) = tiered.summary["kv_offload"]["tiers"]
    hit_blocks = tier["hit_tokens"] // 16
    assert hit_blocks > 0 and hit_blocks < tier["loaded_blocks"] < 2 * hit_blocks
    assert tiered.summary["prefix_hit_rate"] > alone.summary["prefix_hit_rate"]
