"""A recorded run beside its replay, as `pagesim compare` shows them: the recording's
own time series drawn beside the simulation's on one named time axis, what a recording
cannot know shown as unknown (not 0), and each figure's window named."""

from __future__ import annotations

import json
from pathlib import Path

from sim.cli import main
from tests.browser import check_page

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "validation" / "recorded" / "runs" / "rtxpro6000-llama-3.1-8b"


def test_compare_draws_the_recorded_series_and_names_the_windows(tmp_path, capsys, chromium):
    out = tmp_path / "replayed"
    assert (
        main(["validate", str(RUN / "scenario.yaml"), "--observed", str(RUN), "--out", str(out)])
        == 0
    )
    printed = capsys.readouterr().out
    assert printed.startswith("whole run: every measured request")  # validate's window
    page = tmp_path / "compare.html"
    assert main(["compare", str(RUN), str(out / "simulated"), "--html", str(page)]) == 0
    table = capsys.readouterr().out
    rows = {line.split("  ")[0].strip(): line.split("  ") for line in table.splitlines() if line}
    cells = [cell.strip() for cell in rows["preemptions"] if cell.strip()]
    assert cells[1] == "not observable"  # a recording cannot see preemptions
    assert cells[2].isdigit()
    assert "goodput % of arrivals" in rows and "goodput req/s completed" in rows
    result = check_page(chromium, page)
    assert result["errors"] == []
    timeseries = next(p for p in result["plots"] if p["id"] == "timeseries")
    # the simulation: completions, KV use, waiting, running; the recording: completions,
    # and its engine's own waiting and running counts
    assert timeseries["with_points"] == timeseries["traces"] == 7, timeseries
    html = page.read_text()
    assert "seconds from the run" in html and "simulated time (s)" not in html


def test_the_corpus_does_not_claim_figures_a_recording_cannot_know():
    for summary_path in sorted((ROOT / "validation" / "recorded" / "runs").glob("*/summary.json")):
        summary = json.loads(summary_path.read_text())
        assert summary.get("num_preemptions") is None, summary_path
        assert (summary.get("kv") or {}).get("evicted_blocks") is None, summary_path
