"""Every HTML page pagesim writes, loaded in headless Chromium (tests/browser.py): no
error in the console or in loading plotly.min.js, and every plot drawn with data, or
with its "none" note where the series is empty."""

from __future__ import annotations

import shutil
from pathlib import Path

from sim.cli import main
from sim.output.report import FIGURES
from tests.browser import check_page

ROOT = Path(__file__).resolve().parents[3]
SWAP = ROOT / "scenarios" / "policies" / "preemption-swap.yaml"
TINY = ROOT / "scenarios" / "tiny.yaml"

#: A small run that fills every figure: 2 replicas, prefix hits, swaps and preemptions.
EVERYTHING = (
    "simulation.num_requests=200",
    "simulation.warmup_requests=20",
    "workload.prefix.num_groups=3",
    "workload.prefix.length=64",
    "cache.prefix_caching=true",
    "routing.replicas=2",
    "workload.arrival.rate_rps=6",
)


def run(scenario: Path, out: Path, *sets: str) -> Path:
    args = ["run", str(scenario), "--out", str(out), "--quiet"]
    for item in sets:
        args += ["--set", item]
    assert main(args) == 0
    return out


def assert_loads_cleanly(result: dict) -> None:
    assert result["errors"] == []
    assert result["plotly"], "plotly.js did not load"
    assert all(plot["drawn"] for plot in result["plots"]), result["plots"]


def test_a_report_with_every_series_draws_every_plot_with_data(chromium, tmp_path):
    out = run(SWAP, tmp_path / "run", *EVERYTHING)
    result = check_page(chromium, out / "report.html")
    assert_loads_cleanly(result)
    assert [plot["id"] for plot in result["plots"]] == list(FIGURES)
    for plot in result["plots"]:
        assert plot["traces"] > 0 and plot["with_points"] == plot["traces"], plot
        assert plot["notes"] == [], plot


def test_empty_series_say_none_in_the_browser_and_the_compare_page_draws(chromium, tmp_path):
    # tiny: one replica, no prefix caching, no preemption: those plots are notes.
    paged = run(TINY, tmp_path / "a" / "run", "simulation.num_requests=60")
    oracle = run(
        TINY,
        tmp_path / "b" / "run",
        "simulation.num_requests=60",
        "cache.allocator=contiguous-oracle",
    )
    result = check_page(chromium, paged / "report.html")
    assert_loads_cleanly(result)
    plots = {plot["id"]: plot for plot in result["plots"]}
    for name in ("swap", "preemptions", "cache"):
        assert plots[name]["traces"] == 0 and plots[name]["notes"][0].startswith("none")
    for name in ("latency", "throughput", "arrival", "kv", "load"):
        assert plots[name]["with_points"] == plots[name]["traces"] > 0, plots[name]
    page = tmp_path / "compare.html"
    assert main(["compare", str(paged), str(oracle), "--html", str(page)]) == 0
    result = check_page(chromium, page)
    assert_loads_cleanly(result)
    assert [plot["id"] for plot in result["plots"]] == ["cdf", "timeseries"]
    cdf, timeseries = result["plots"]
    assert cdf["with_points"] == cdf["traces"] == 6, cdf  # 3 per run
    # completions, KV use, waiting and running per run
    assert timeseries["with_points"] == timeseries["traces"] == 8, timeseries


def test_the_check_catches_a_page_whose_plotly_js_is_missing(chromium, tmp_path):
    out = run(TINY, tmp_path / "run", "simulation.num_requests=20")
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    shutil.copy(out / "report.html", moved / "report.html")
    result = check_page(chromium, moved / "report.html")
    assert result["plotly"] is None
    assert any("plotly.min.js" in error for error in result["errors"]), result["errors"]
    assert not any(plot["drawn"] for plot in result["plots"])
