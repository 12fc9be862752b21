"""The HTML report: its header, every figure on the page, plotly.js written once beside
it and loaded by a relative path, empty series that say "none", percentile markers, the
warm-up shaded, big runs thinned, and runs without data that still give a page."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import pytest
from plotly.offline import get_plotlyjs

from sim.engine.records import STEP_FIELDS, RequestOutcome, StepRecord
from sim.output.page import PLOTLY_JS, plotly_script_src
from sim.output.report import FIGURE_TITLES, FIGURES, MAX_POINTS, downsample_indices, write_report
from sim.output.steplog import StepLog
from sim.output.summary import summarize
from sim.workload.request import Request

SLO = {"slo_ttft_s": 1.0, "slo_tpot_s": 0.1}


def finished_request(req_id, arrival, replica=0):
    request = Request(req_id, arrival, np.zeros(16, np.int32), 8)
    return RequestOutcome(request, replica, arrival, arrival + 0.1, arrival + 1.0, 0, 0, 8, "")


def step_log(num_steps, num_replicas=1):
    log = StepLog(initial_capacity=64)
    for i in range(num_steps):
        used = i % 50
        log.record(
            StepRecord(
                0.01 * i,
                i % num_replicas,
                0.01,
                used % 9,
                0,
                used % 9,
                used,
                0,
                0,
                50 - used,
                16 * used,
                0,
                0,
                0,
                800 - 16 * used,
                0,
                i % 4,
                int(i % 100 == 0),
                i % 5,
            )
        )
    return log


def make_report(tmp_path, requests, log, num_replicas=1, title="run <a & b>", **kwargs):
    summary = summarize(requests, log, total_slots=800, num_replicas=num_replicas, **SLO)
    return write_report(tmp_path, requests, log, summary, title, **kwargs), summary


def plot_data(page: str, div_id: str) -> list:
    """The trace list plotly was given for one figure (its JSON from the page)."""
    match = re.search(rf'"{div_id}",\s*(\[.*?\]),\s*\{{', page, re.S)
    assert match, f"no figure {div_id}"
    return json.loads(match.group(1))


def series(data) -> np.ndarray:
    """Plotly ships numpy data either as a JSON list or as a base64 typed array."""
    if isinstance(data, list):
        return np.asarray(data, dtype=float)
    return np.frombuffer(base64.b64decode(data["bdata"]), dtype=data["dtype"]).astype(float)


def layout_of(page: str, div_id: str) -> dict:
    """The layout plotly was given for one figure."""
    match = re.search(rf'"{div_id}",\s*\[.*?\],\s*(\{{.*?\}}),\s*\{{"displaylogo"', page, re.S)
    assert match, f"no figure {div_id}"
    return json.loads(match.group(1))


def notes(page: str, div_id: str) -> list[str]:
    return [a.get("text", "") for a in layout_of(page, div_id).get("annotations", [])]


SCENARIO = {
    "model": {"name": "llama-3-8b"},
    "hardware": {"name": "h100-sxm"},
    "tensor_parallel": 2,
    "routing": {"replicas": 4, "router": "prefix-affinity"},
    "scheduler": {"policy": "fcfs", "batching": "mixed", "max_num_seqs": 256},
    "preemption": {"mode": "swap", "victim": "last-arrived"},
    "cache": {"allocator": "paged", "block_size": 16, "prefix_caching": True},
    "eviction": {"policy": "lru"},
    "workload": {"arrival": {"kind": "gamma", "rate_rps": 12.5, "cv": 2.0}},
    "simulation": {"num_requests": 3000, "seed": 7, "warmup_requests": 200},
}
COMMAND = ["pagesim", "run", "x.yaml", "--set", "routing.router=prefix-affinity", "--seed=7"]


def test_report_has_header_summary_and_every_figure(tmp_path):
    requests = [finished_request(i, 0.5 * i) for i in range(30)]
    path, summary = make_report(
        tmp_path, requests, step_log(300), scenario=SCENARIO, command=COMMAND
    )
    assert path == tmp_path / "report.html"
    page = path.read_text()
    for title in FIGURE_TITLES.values():
        assert title in page
    assert "run &lt;a &amp; b&gt;" in page and "run <a & b>" not in page
    facts = page.split('<table class="facts">')[1].split("</table>")[0]
    for text in (
        "llama-3-8b",
        "h100-sxm",
        "<td>tensor parallel</td><td>2</td>",
        "4 (router prefix-affinity)",
        "swap (victim last-arrived)",
        "eviction lru",
        "gamma 12.5 req/s (cv 2)",
        "3,000 requests, the first 200 as warm-up",
        "<td>seed</td><td>7</td>",
        "--set routing.router=prefix-affinity --seed 7",
    ):
        assert text in facts, text
    assert '<table class="summary">' in page
    assert f"{summary['throughput_rps']:.2f}" in page
    window = summary["steady_state"]
    verdict = f'<p class="verdict {window["verdict"].replace(" ", "-")}"><strong>'
    assert page.index(verdict) < page.index('<table class="summary">')
    assert f"Limited by {window['limited_by']} (" in page
    assert page.count("Plotly.newPlot(") == len(FIGURES) == len(FIGURE_TITLES)
    assert "NaN" not in page.split("</table>")[1]


def test_the_header_says_there_were_no_overrides_and_skips_them_without_a_command(tmp_path):
    requests = [finished_request(i, 0.5 * i) for i in range(5)]
    path, _ = make_report(tmp_path, requests, step_log(50), scenario=SCENARIO, command=["x"])
    assert "<td>overrides</td><td>none</td>" in path.read_text()
    path, _ = make_report(tmp_path, requests, step_log(50), scenario=SCENARIO)
    assert "<td>overrides</td>" not in path.read_text()


def test_plotly_js_is_written_once_beside_the_page_and_loaded_by_a_relative_path(tmp_path):
    requests = [finished_request(i, 0.5 * i) for i in range(10)]
    path, _ = make_report(tmp_path, requests, step_log(100))
    page = path.read_text()
    library = tmp_path / PLOTLY_JS
    assert library.read_text(encoding="utf-8") == get_plotlyjs()
    assert page.count("<script src=") == 1 and f'<script src="{PLOTLY_JS}"></script>' in page
    assert get_plotlyjs()[:2000] not in page  # not embedded
    assert len(page) < 1_000_000 < library.stat().st_size
    # A second page in the folder reuses the file: not written again.
    stamp = library.stat().st_mtime_ns
    make_report(tmp_path, requests, step_log(100))
    assert library.stat().st_mtime_ns == stamp
    assert sorted(p.name for p in tmp_path.iterdir()) == [PLOTLY_JS, "report.html"]


def test_run_folders_side_by_side_store_plotly_js_once(tmp_path):
    """Each run folder holds its plotly.min.js (it opens offline, copied anywhere), as a
    hard link to one copy in the folder above, so runs/ stores 4.8 MB once."""
    requests = [finished_request(i, 0.5 * i) for i in range(10)]
    runs = tmp_path / "runs"
    for name in ("a", "b"):
        (runs / name).mkdir(parents=True)
        make_report(runs / name, requests, step_log(50))
    a, b = (runs / name / PLOTLY_JS for name in ("a", "b"))
    assert a.read_text(encoding="utf-8") == get_plotlyjs()
    assert a.stat().st_ino == b.stat().st_ino and a.stat().st_nlink == 3
    (shared,) = runs.glob(".plotly-*.min.js")
    assert shared.stat().st_ino == a.stat().st_ino


def test_plotly_js_can_be_a_shared_file_or_a_url(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    src = plotly_script_src(tmp_path / "runs" / "a" / "report.html", str(shared))
    assert src == "../../shared/plotly.min.js" and (shared / PLOTLY_JS).is_file()
    url = "https://cdn.plot.ly/plotly-3.0.1.min.js"
    assert plotly_script_src(tmp_path / "b" / "report.html", url) == url
    assert not (tmp_path / "b").exists()


UNFINISHED = RequestOutcome.unserved(Request(0, 0.0, np.zeros(4, np.int32), 3), 0, "unfinished")


@pytest.mark.parametrize("requests", [[], [UNFINISHED]])
def test_report_without_data_does_not_crash(tmp_path, requests):
    path, _ = make_report(tmp_path, requests, StepLog())
    page = path.read_text()
    assert all(title in page for title in FIGURE_TITLES.values())
    assert "no data" in page


def test_empty_series_say_none_instead_of_a_flat_line(tmp_path):
    # step_log has no swapped or cached blocks, and a run with no preemption is made by
    # zeroing the column: those figures carry no trace, only a note.
    requests = [finished_request(i, 0.5 * i) for i in range(30)]
    log = StepLog()
    for row in step_log(300).as_array():
        record = list(row)
        record[STEP_FIELDS.index("num_preempted")] = 0
        log.record(StepRecord(*record))
    path, _ = make_report(tmp_path, requests, log)
    page = path.read_text()
    for div_id, note in (
        ("preemptions", "none: no request was preempted"),
        ("swap", "none: no request was swapped to the CPU"),
        ("cache", "none: no prompt token came from the prefix cache, no block was cached"),
    ):
        assert plot_data(page, div_id) == []
        assert notes(page, div_id) == [note]
        assert layout_of(page, div_id)["yaxis"]["visible"] is False
    assert plot_data(page, "load") and not any(n.startswith("none") for n in notes(page, "load"))


def test_cdfs_mark_percentiles_and_time_figures_shade_the_warm_up(tmp_path):
    requests = [finished_request(i, 0.5 * i) for i in range(30)]
    log = step_log(2000)
    summary = summarize(requests, log, total_slots=800, warmup_requests=10, **SLO)
    path = write_report(tmp_path, requests, log, summary, "run")
    page = path.read_text()
    marks = [t for t in plot_data(page, "latency") if t.get("text") == ["p50", "p90", "p99"]]
    assert len(marks) == 3
    ttft_ms = np.array([0.1] * 30) * 1000
    np.testing.assert_allclose(series(marks[0]["x"]), np.percentile(ttft_ms, [50, 90, 99]))
    start = summary["steady_state"]["window_start_s"]
    assert start > 0
    for div_id in ("throughput", "arrival", "kv", "load", "preemptions"):
        shapes = layout_of(page, div_id)["shapes"]
        assert {(s["x0"], s["x1"]) for s in shapes} == {(0.0, start)}, div_id
        assert "warm-up" in [a.get("text") for a in layout_of(page, div_id)["annotations"]]


def test_several_replicas_get_a_selector_panels_and_a_table(tmp_path):
    requests = [finished_request(i, 0.5 * i, replica=i % 3) for i in range(30)]
    path, summary = make_report(tmp_path, requests, step_log(300, num_replicas=3), 3)
    page = path.read_text()
    # The dropdown's buttons (legend names also say "replica N", so look for labels).
    labels = re.findall(r'"label":\s*"(replica \d+)"', page)
    assert labels == ["replica 0", "replica 1", "replica 2"]
    assert len(summary["per_replica"]) == 3
    # Batch size and queue length: one panel per replica, on one y scale.
    load = layout_of(page, "load")
    titles = [a["text"] for a in load["annotations"] if a["text"].startswith("replica")]
    assert titles == ["replica 0", "replica 1", "replica 2"]
    assert load["yaxis2"]["matches"] == "y" and load["yaxis3"]["matches"] == "y"
    table = page.split('<table class="replicas">')[1].split("</table>")[0]
    assert table.count("<tr>") == 4 and "prefix hit rate" in table


def test_big_runs_are_thinned(tmp_path):
    num_steps = 3 * MAX_POINTS
    path, _ = make_report(tmp_path, [finished_request(0, 0.0)], step_log(num_steps))
    traces = plot_data(path.read_text(), "preemptions")
    assert len(traces) == 1
    x, y = series(traces[0]["x"]), series(traces[0]["y"])
    assert len(x) == len(y) == MAX_POINTS
    assert x[0] == 0.0 and x[-1] == pytest.approx(0.01 * (num_steps - 1))
    # cumulated before thinning: the last point counts every preemption of the run
    assert y[-1] == len(range(0, num_steps, 100))


def test_downsample_indices_keep_ends_and_bound():
    assert downsample_indices(10, 100).tolist() == list(range(10))
    idx = downsample_indices(12345, 1000)
    assert idx[0] == 0 and idx[-1] == 12344 and len(idx) <= 1000
    assert np.all(np.diff(idx) > 0)
    np.testing.assert_array_equal(idx, downsample_indices(12345, 1000))


def test_a_live_servers_facts_name_no_gpu_or_cost_model():
    """``pagesim observe`` of a live server: the scenario's GPU is not the server's (it
    may be a CPU), and no cost model made the times."""
    from sim.output.header import run_facts

    scenario = {"hardware": {"name": "h100-sxm"}, "cost_model": {"kind": "analytic"}}
    observed = {"observed": {"endpoint": "http://127.0.0.1:8000"}}
    live = dict(run_facts(scenario, None, observed))
    assert live["GPU"].startswith("not observable (the server at http://127.0.0.1:8000")
    assert live["cost model"] == "none: times measured (http://127.0.0.1:8000)"
    imported = dict(run_facts(scenario, None, {**observed, "recorded": {"format": "x"}}))
    assert imported["GPU"] == "h100-sxm"  # a recording names the GPU it ran on
    simulated = dict(run_facts(scenario))
    assert simulated["GPU"] == "h100-sxm" and simulated["cost model"].startswith("analytic")


def test_a_run_with_prefill_and_decode_pools_names_them_and_their_link():
    from sim.config.loader import load_scenario
    from sim.output.header import run_facts

    path = Path(__file__).resolve().parents[3] / "scenarios" / "disaggregated.yaml"
    scenario = load_scenario(path, ["routing.disaggregation.decode.replicas=2"])
    facts = dict(run_facts(scenario.model_dump(mode="json")))
    assert "replicas" not in facts
    assert facts["pools"] == (
        "1 prefill (router round-robin) + 2 decode (router round-robin); "
        "link network, decider always"
    )
