"""The HTML report: every figure is on the page, plotly.js is embedded exactly once, big
runs are thinned, and runs without data still give a page."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest

from sim.engine.records import RequestOutcome, StepRecord
from sim.output.report import FIGURE_TITLES, MAX_POINTS, downsample_indices, write_report
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


def make_report(tmp_path, requests, log, num_replicas=1, title="run <a & b>"):
    summary = summarize(requests, log, total_slots=800, num_replicas=num_replicas, **SLO)
    return write_report(tmp_path, requests, log, summary, title), summary


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


def test_report_has_summary_and_every_figure(tmp_path):
    requests = [finished_request(i, 0.5 * i) for i in range(30)]
    path, summary = make_report(tmp_path, requests, step_log(300))
    assert path == tmp_path / "report.html"
    page = path.read_text()
    for title in FIGURE_TITLES.values():
        assert title in page
    assert "run &lt;a &amp; b&gt;" in page and "run <a & b>" not in page
    assert '<table class="summary">' in page
    assert f"{summary['throughput_rps']:.2f}" in page
    window = summary["steady_state"]
    verdict = f'<p class="verdict {window["verdict"].replace(" ", "-")}"><strong>'
    assert page.index(verdict) < page.index('<table class="summary">')
    assert f"Limited by {window['limited_by']}." in page
    assert page.count("Plotly.newPlot(") == len(FIGURE_TITLES)
    # plotly.js embedded once, inline (works offline): no CDN script tag.
    assert page.count("plotly.js v") == 1 and "<script src=" not in page
    assert "NaN" not in page.split("</table>")[0]


UNFINISHED = RequestOutcome.unserved(Request(0, 0.0, np.zeros(4, np.int32), 3), 0, "unfinished")


@pytest.mark.parametrize("requests", [[], [UNFINISHED]])
def test_report_without_data_does_not_crash(tmp_path, requests):
    path, _ = make_report(tmp_path, requests, StepLog())
    page = path.read_text()
    assert all(title in page for title in FIGURE_TITLES.values())
    assert "no data" in page


def test_several_replicas_get_a_selector(tmp_path):
    requests = [finished_request(i, 0.5 * i, replica=i % 3) for i in range(30)]
    path, summary = make_report(tmp_path, requests, step_log(300, num_replicas=3), 3)
    page = path.read_text()
    # The dropdown's buttons (legend names also say "replica N", so look for labels).
    labels = re.findall(r'"label":\s*"(replica \d+)"', page)
    assert labels == ["replica 0", "replica 1", "replica 2"]
    assert len(summary["per_replica"]) == 3


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
