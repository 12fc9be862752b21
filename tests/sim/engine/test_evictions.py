"""Evictions are visible: each step's count in steps.csv, the run's total in summary.json
and the tables, and a warning when the eviction policy could not have mattered."""

from __future__ import annotations

import json
from pathlib import Path

from sim.cli import main
from sim.config.loader import load_scenario
from sim.run.runner import simulate

ROOT = Path(__file__).resolve().parents[3]
TINY = str(ROOT / "scenarios" / "tiny.yaml")

#: Two long shared prompts on a pool that holds about one and a half of them.
SHARED = {
    "cache.prefix_caching": "true",
    "cache.num_blocks": "48",
    "workload.prefix": "{num_groups: 6, length: 256, fraction: 1.0}",
    "workload.input": "{kind: uniform, min: 8, max: 32}",
    "simulation.num_requests": "120",
}


def run(tmp_path, name, extra=(), **sets):
    args = [a for key, value in {**SHARED, **sets}.items() for a in ("--set", f"{key}={value}")]
    out = tmp_path / name
    assert main(["run", TINY, *args, *extra, "--out", str(out), "--quiet", "--no-report"]) == 0
    return out


def summary_of(out):
    return json.loads((out / "summary.json").read_text())


def test_steps_and_summary_count_the_blocks_the_allocator_evicted(tmp_path):
    scenario = load_scenario(TINY, overrides=[f"{k}={v}" for k, v in SHARED.items()])
    result = simulate(scenario)
    per_step = result.steps.column("evicted_blocks")
    assert per_step.sum() > 0 and (per_step >= 0).all()
    assert result.summary["kv"]["evicted_blocks"] == int(per_step.sum())
    assert result.summary["warnings"] == []


def test_eviction_policies_differ_only_where_blocks_were_evicted(tmp_path, capsys):
    lru = summary_of(run(tmp_path, "lru", **{"eviction.policy": "lru"}))
    assert lru["kv"]["evicted_blocks"] > 0 and lru["warnings"] == []
    roomy = summary_of(
        run(tmp_path, "roomy", **{"eviction.policy": "lfu", "cache.num_blocks": "4096"})
    )
    assert roomy["kv"]["evicted_blocks"] == 0
    (warning,) = roomy["warnings"]
    assert warning.startswith("eviction.policy lfu never chose") and "peak use" in warning
    assert f"warning: {warning}" in capsys.readouterr().err


def test_an_eviction_policy_without_prefix_caching_is_warned_about(tmp_path, capsys):
    off = summary_of(
        run(tmp_path, "off", **{"cache.prefix_caching": "false", "eviction.policy": "fifo"})
    )
    assert off["warnings"] == [
        "eviction.policy fifo cannot matter: cache.prefix_caching is off, so no block is "
        "ever kept for reuse"
    ]
    assert "cannot matter" in capsys.readouterr().err
    plain = summary_of(run(tmp_path, "plain", **{"cache.prefix_caching": "false"}))
    assert plain["warnings"] == []  # no eviction policy named: nothing to warn about


def test_compare_shows_the_evictions_of_each_run(tmp_path, capsys):
    a = run(tmp_path, "a", **{"eviction.policy": "lru"})
    b = run(tmp_path, "b", **{"eviction.policy": "lru", "cache.num_blocks": "4096"})
    capsys.readouterr()
    assert main(["compare", str(a), str(b)]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "blocks evicted" in x]
    counts = line.split()[-2:]
    assert int(counts[0]) == summary_of(a)["kv"]["evicted_blocks"] > 0
    assert counts[1] == "0"


def test_steps_csv_has_the_column_and_its_rows_sum_to_the_total(tmp_path):
    out = run(tmp_path, "csv")
    lines = (out / "steps.csv").read_text().splitlines()
    column = lines[0].split(",").index("evicted_blocks")
    total = sum(int(line.split(",")[column]) for line in lines[1:])
    assert total == summary_of(out)["kv"]["evicted_blocks"] > 0


def test_evictions_without_a_single_hit_are_warned_about_in_run_compare_and_sweep(tmp_path, capsys):
    # Distinct prompts (no shared prefix) on a pool that fills: blocks are evicted, but no
    # request ever hits the cache, so lru and lfu keep different blocks to no effect.
    distinct = {"workload.prefix": "{num_groups: 0}", "workload.input": "{kind: fixed, value: 400}"}
    runs = [run(tmp_path, p, **distinct, **{"eviction.policy": p}) for p in ("lru", "lfu")]
    summaries = [summary_of(out) for out in runs]
    for summary, policy in zip(summaries, ("lru", "lfu"), strict=True):
        assert summary["kv"]["evicted_blocks"] > 0 and summary["prefix_hit_rate"] == 0
        (warning,) = summary["warnings"]
        assert warning.startswith(f"eviction.policy {policy} could not matter")
    capsys.readouterr()
    assert main(["compare", *map(str, runs)]) == 0
    out = capsys.readouterr().out
    assert "warning (lru): eviction.policy lru could not matter" in out
    assert "warning (lfu): eviction.policy lfu could not matter" in out

    from sim.sweep.points import point_row

    class Point:  # (what point_row reads of a sweep point)
        index, seed, folder, values = 0, 0, "p0", {}

    row = point_row(Point(), [], summaries[0], None)
    assert row["warnings"].startswith("eviction.policy lru could not matter")
