"""pagesim compare's offline-optimal yardstick: hit rates over a belady run's."""

from __future__ import annotations

import json

from sim.cli import main
from sim.output.tables import compare_table
from sim.output.yardstick import hit_rate_vs_belady


def scenario(policy, **changes):
    base = {"name": policy, "cache": {"prefix_caching": True}, "eviction": {"policy": policy}}
    return {**base, **changes}


def test_hit_rates_are_fractions_of_the_belady_runs_on_the_same_scenario():
    summaries = {
        "lru": {"prefix_hit_rate": 0.3},
        "opt": {"prefix_hit_rate": 0.6},
        "other": {"prefix_hit_rate": 0.5},
    }
    scenarios = {
        "lru": scenario("lru"),
        "opt": scenario("belady"),
        "other": scenario("lru", slo={"ttft_s": 1.0}),  # another scenario: no figure
    }
    assert hit_rate_vs_belady(summaries, scenarios) == {"lru": 0.5, "opt": 1.0, "other": None}
    assert hit_rate_vs_belady(summaries, {"lru": scenario("lru")}) is None  # no yardstick
    table = compare_table(summaries, hit_rate_vs_belady(summaries, scenarios))
    row = next(line for line in table.splitlines() if "of belady's" in line)
    assert row.split()[-3:] == ["50.0%", "100.0%", "-"]
    assert "of belady's" not in compare_table(summaries)


def test_compare_reads_each_runs_scenario(tmp_path, capsys):
    runs = []
    for name, policy, rate in (("lru-run", "lru", 0.2), ("belady-run", "belady", 0.4)):
        run = tmp_path / name
        run.mkdir()
        (run / "summary.json").write_text(json.dumps({"prefix_hit_rate": rate}))
        (run / "scenario.json").write_text(json.dumps(scenario(policy)))
        runs.append(str(run))
    assert main(["compare", *runs]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "of belady's" in line)
    assert row.split()[-2:] == ["50.0%", "100.0%"]
