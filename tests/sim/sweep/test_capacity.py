"""``pagesim capacity``: the rate search on a known threshold (bracketing, k probes per
round, tolerance, noise above the edge), SLO parsing, prices and cost, and the command
end to end (a resumed search reruns nothing; the page in Chromium)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from sim.catalog.prices import GPU_PRICES, cost_per_million_tokens, gpu_price
from sim.cli import main
from sim.sweep.search import RateSearch
from sim.sweep.slo import Bound, meets, parse_bound
from tests.browser import check_page

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "scenarios" / "tiny.yaml"


def search_to_end(threshold: float, k: int, start: float = 1.0, tol: float = 0.01):
    search = RateSearch(start, tol)
    rounds = 0
    while rates := search.next_rates(k):
        assert len(rates) <= k
        rounds += 1
        for rate in rates:
            search.record(rate, rate <= threshold)
    return search, rounds


@pytest.mark.parametrize("threshold", [0.37, 3.0, 123.4, 5000.0])
def test_the_search_brackets_and_bisects_to_the_tolerance(threshold):
    search, _ = search_to_end(threshold, k=1)
    assert search.status() == "converged"
    assert search.capacity() <= threshold < search.hi
    assert search.hi - search.capacity() <= 0.01 * search.hi


def test_more_probes_per_round_take_fewer_rounds():
    _, one = search_to_end(123.4, k=1)
    _, four = search_to_end(123.4, k=4)
    assert four < one
    assert four <= one / 2 + 1


def test_a_lucky_pass_above_a_failure_does_not_raise_the_capacity():
    search = RateSearch(10, 0.05)
    for rate, ok in [(10, True), (20, False), (40, True)]:
        search.record(rate, ok)
    assert (search.lo, search.hi) == (10, 20)
    assert all(10 < r < 20 for r in search.next_rates(3))


def test_no_passing_rate_and_no_failing_rate_end_the_search():
    search, _ = search_to_end(-1, k=2)  # nothing passes
    assert (search.status(), search.capacity()) == ("none", 0.0)
    search, _ = search_to_end(float("inf"), k=2)
    assert search.status() == "unbounded"


def test_slo_terms_parse_units_and_say_what_is_wrong():
    assert parse_bound("ttft.p99=2s") == Bound("ttft.p99", 2.0)
    assert parse_bound("tpot.p99=100ms") == Bound("tpot.p99", 0.1)
    assert parse_bound("goodput=90%") == Bound("goodput", 0.9)
    for bad, expected in [
        ("ttft=2", "METRIC=LIMIT"),
        ("goodput=2s", "share"),
        ("tpot.p50=-1", "number"),
        ("e2e.p90=5%", "seconds"),
    ]:
        with pytest.raises(ValueError, match=expected):
            parse_bound(bad)
    summary = {"steady_state": {"verdict": "stable", "goodput": 0.95, "ttft_s": {"p99": 1.5}}}
    assert meets([Bound("ttft.p99", 2.0), Bound("goodput", 0.9)], summary)
    assert not meets([Bound("ttft.p99", 1.0)], summary)
    summary["steady_state"]["verdict"] = "overloaded"  # a growing queue never meets it
    assert not meets([Bound("ttft.p99", 2.0)], summary)


def test_every_price_names_its_source_and_cost_follows_from_it():
    for name, price in GPU_PRICES.items():
        assert price.usd_per_gpu_hour > 0 and "https://" in price.source, name
    price = gpu_price("h100-sxm")
    # 2 GPUs at $6.88/h producing 1000 tok/s: 13.76 $/h for 3.6 M tokens
    assert cost_per_million_tokens(price, 2, 1000.0) == pytest.approx(13.76 / 3.6)
    assert gpu_price("l4") is None and gpu_price("l4", {"l4": 0.8}).usd_per_gpu_hour == 0.8


def test_capacity_end_to_end_marks_the_cheapest_and_resumes(chromium, tmp_path, capsys):
    out = tmp_path / "cap"
    args = [
        "capacity",
        str(TINY),
        "--set",
        "simulation.num_requests=150",
        "--vary",
        "hardware=h100-sxm,a100-80gb",
        "--slo",
        "ttft.p99=20ms",
        "--tolerance",
        "0.1",
        "--out",
        str(out),
        "--jobs",
        "2",
        "--quiet",
    ]
    assert main(args) == 0
    with open(out / "capacity.csv", newline="") as f:
        configs = list(csv.DictReader(f))
    assert [c["hardware"] for c in configs] == ["h100-sxm", "a100-80gb"]
    for c in configs:
        assert c["status"] == "converged" and float(c["capacity_rps"]) > 0
        lo, hi = float(c["capacity_rps"]), float(c["lowest_failing_rps"])
        assert hi - lo <= 0.1 * hi
        assert float(c["ttft.p99_at_capacity"]) <= 0.02
    costs = [float(c["usd_per_million_output_tokens"]) for c in configs]
    cheapest = [c["cheapest"] for c in configs]
    assert cheapest.count("true") == 1 and cheapest[costs.index(min(costs))] == "true"
    with open(out / "probes.csv", newline="") as f:
        probes = list(csv.DictReader(f))
    for c in configs:  # the capacity is a probe that passed; the bracket's top failed
        mine = {float(p["rate_rps"]): p["passed"] for p in probes if p["config"] == c["config"]}
        assert mine[float(c["capacity_rps"])] == "true"
        assert mine[float(c["lowest_failing_rps"])] == "false"
    report = json.loads((out / "capacity.json").read_text())
    assert report["status"] == "done" and len(report["probes"]) == len(probes)
    first = (out / "capacity.csv").read_bytes()
    runs = sorted(p.name for p in (out / "runs").iterdir())
    mtimes = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("*")}
    assert main(args) == 0  # a second time: every probe is found, none is run again
    assert (out / "capacity.csv").read_bytes() == first
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("*")} == mtimes
    assert sorted(p.name for p in (out / "runs").iterdir()) == runs
    result = check_page(chromium, out / "capacity.html")
    assert result["errors"] == [] and result["plotly"]
    (plot,) = result["plots"]
    assert plot["drawn"] and plot["traces"] == 2 and plot["points"] == len(probes)
    html = (out / "capacity.html").read_text()
    flat = html.replace(" ", "")
    assert '"plot_bgcolor":"white"' in flat and "#E5ECF6" not in flat  # the report's theme
    assert not re.search(r"<td[^>]*>[^<]*\de[+-]\d", html)  # no 1.158e+04 in the table


def test_a_configuration_whose_probes_fail_is_a_failure_with_the_reason(tmp_path, capsys):
    """A probe that cannot run (here a scheduler plug-in that raises) stops that
    configuration's search: capacity is unknown, not 0, and the reason is printed."""
    plugin = tmp_path / "boom.py"
    plugin.write_text(
        "class Boom:\n"
        "    def order(self, waiting, view):\n"
        "        raise RuntimeError('boom on purpose')\n"
    )
    scenario = tmp_path / "s.yaml"
    text = (ROOT / "scenarios" / "tiny.yaml").read_text()
    scenario.write_text(text.replace("scheduler:\n", "scheduler:\n  policy: boom.py:Boom\n"))
    out = tmp_path / "cap"
    code = main(
        [
            "capacity",
            str(scenario),
            "--out",
            str(out),
            "--jobs",
            "1",
            "--set",
            "simulation.num_requests=80",
        ]
    )
    assert code == 1
    printed = capsys.readouterr().out
    assert "configuration 0 failed: the probe at" in printed and "boom on purpose" in printed
    (row,) = json.loads((out / "capacity.json").read_text())["configurations"]
    assert row["status"] == "failed" and row["capacity_rps"] is None
    assert len(json.loads((out / "capacity.json").read_text())["probes"]) == 1


def test_an_out_holding_another_search_is_replaced_only_with_force(tmp_path, capsys):
    """One rule for --out: the same search resumes; another search's folder is refused
    (its results would be overwritten unasked) unless --force, which replaces it whole."""
    out = tmp_path / "cap"
    args = ["capacity", str(TINY), "--set", "simulation.num_requests=60", "--tolerance", "0.5"]
    args += ["--out", str(out), "--jobs", "1", "--quiet"]
    assert main([*args, "--slo", "ttft.p99=20ms"]) == 0
    capsys.readouterr()
    assert main([*args, "--slo", "ttft.p99=20ms"]) == 0
    assert "the same capacity as before" in capsys.readouterr().err
    first = (out / "capacity.json").read_text()
    assert main([*args, "--slo", "ttft.p99=50ms"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "other settings; pass --force" in err
    assert (out / "capacity.json").read_text() == first  # nothing replaced
    assert main([*args, "--slo", "ttft.p99=50ms", "--force"]) == 0
    assert json.loads((out / "capacity.json").read_text())["search"]["slo"] == [
        ["ttft.p99 <= 0.05 s"]
    ]


def test_each_round_says_how_many_are_left_and_about_how_long(tmp_path, capsys):
    args = ["capacity", str(TINY), "--set", "simulation.num_requests=150", "--slo"]
    args += ["ttft.p99=20ms", "--tolerance", "0.1", "--out", str(tmp_path / "c"), "--jobs", "2"]
    assert main(args) == 0
    rounds = [line for line in capsys.readouterr().err.splitlines() if "capacity: round" in line]
    assert len(rounds) >= 3
    lefts = [re.search(r"about (\d+) rounds? left \((.+)\)$", line) for line in rounds[:-1]]
    assert all(lefts), rounds
    assert rounds[-1].endswith("done")
    bisecting = [int(m[1]) for m, line in zip(lefts, rounds) if "inf]" not in line]
    assert bisecting == sorted(bisecting, reverse=True)  # bisection only ever narrows
