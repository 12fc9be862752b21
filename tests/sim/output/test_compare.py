"""pagesim compare: labels that never collapse, the scenario fields that differ, each
--format, KV figures in comparable units, and --html."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from sim.cli import main
from sim.output.compare import (
    MISSING,
    differing_fields,
    flatten,
    format_compare,
    run_labels,
)
from sim.output.page import PLOTLY_JS
from sim.output.tables import metric_rows

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "scenarios" / "tiny.yaml"


@pytest.mark.parametrize(
    ("paths", "labels"),
    [
        (["runs/x", "runs/y"], ["x", "y"]),
        (["a/measured", "b/measured", "c/other"], ["a/measured", "b/measured", "other"]),
        (["/p/a/measured", "/q/a/measured"], ["p/a/measured", "q/a/measured"]),
        (["/x/r", "/y/x/r"], ["/x/r", "y/x/r"]),  # one path is the tail of the other
        (["runs/x", "runs/x/", "runs/./x"], ["x", "x (2)", "x (3)"]),  # the same run
    ],
)
def test_run_labels_are_the_shortest_distinguishing_suffix(paths, labels):
    assert run_labels(paths) == labels
    assert len(set(run_labels(paths))) == len(paths)


def test_flatten_and_differing_fields():
    a = {"name": "a", "cache": {"block_size": 16, "allocator": "paged"}, "tags": [1, 2]}
    b = {"name": "b", "cache": {"block_size": 1, "allocator": "paged"}, "tags": [1, 2]}
    c = {"name": "c", "cache": {"block_size": 16, "allocator": "paged"}, "extra": {}}
    assert flatten(a) == {
        "name": "a",
        "cache.block_size": 16,
        "cache.allocator": "paged",
        "tags": [1, 2],
    }
    fields = differing_fields({"a": a, "b": b, "c": c, "none": None})
    assert list(fields) == ["cache.block_size", "extra", "name", "tags"]
    assert fields["cache.block_size"] == {"a": 16, "b": 1, "c": 16, "none": MISSING}
    assert fields["tags"]["c"] is MISSING and fields["extra"]["c"] == {}
    assert differing_fields({"a": a, "b": dict(a)}) == {}
    assert differing_fields({"a": a, "none": None}) == {}  # one scenario: nothing to compare


def paged_and_contiguous():
    """Two runs' summaries with the same peak in slots: 100 blocks of 16 and 1,600 of 1."""
    paged = {
        "block_size": 16,
        "total_slots": 3200,
        "kv": {"peak_used_blocks": 100, "peak_used_slots": 1600, "peak_used_fraction": 0.5},
    }
    contiguous = {
        "block_size": 1,
        "total_slots": 3200,
        "kv": {"peak_used_blocks": 1600, "peak_used_slots": 1600, "peak_used_fraction": 0.5},
    }
    return {"paged": paged, "oracle": contiguous}


def test_kv_figures_are_in_slots_and_percent_of_the_pool():
    summaries = paged_and_contiguous()
    table = format_compare(summaries)
    assert "KV peak blocks" not in table
    lines = {line.split("  ")[0]: line.split() for line in table.splitlines()}
    assert lines["KV peak used slots"][-2:] == ["1,600", "1,600"]
    assert lines["KV peak used % of pool"][-2:] == ["50.0%", "50.0%"]
    assert lines["KV pool slots per replica"][-2:] == ["3,200", "3,200"]
    # A summary written before peak_used_slots existed: derived from blocks x block size.
    del summaries["paged"]["kv"]["peak_used_slots"]
    row = next(r for r in metric_rows(summaries["paged"]) if r[0] == "KV peak used slots")
    assert row[1] == 1600


SCENARIOS = {
    "paged": {"name": "x", "cache": {"allocator": "paged", "block_size": 16}},
    "oracle": {"name": "x", "cache": {"allocator": "contiguous-oracle", "block_size": 1}},
}


def test_format_table_has_the_metrics_and_the_differing_fields():
    text = format_compare(paged_and_contiguous(), SCENARIOS, fmt="table")
    metrics, fields = text.split("\n\n")
    assert metrics.splitlines()[0].split() == ["metric", "paged", "oracle"]
    assert fields.splitlines() == [
        "scenario field that differs  paged             oracle",
        "cache.allocator              paged  contiguous-oracle",
        "cache.block_size                16                  1",
    ]
    assert "\n\n" not in format_compare(paged_and_contiguous(), {})  # nothing differs
    long = {
        name: {**scenario, "description": name * 30 + "\nsecond line"}
        for name, scenario in SCENARIOS.items()
    }
    fields = format_compare(paged_and_contiguous(), long).split("\n\n")[1]
    assert "pagedpaged" in fields and "oracle" * 30 not in fields
    assert all(len(line) < 130 for line in fields.splitlines())
    csv_text = format_compare(paged_and_contiguous(), long, fmt="csv")
    assert "oracle" * 30 + "\nsecond line" in csv_text
    markdown = format_compare(paged_and_contiguous(), long, fmt="markdown")
    assert "oracle" * 30 + " second line |" in markdown


def test_format_csv_is_one_rectangle_of_numbers_in_each_labels_unit():
    summaries = paged_and_contiguous()
    summaries["paged"]["ttft_s"] = {"p50": 0.0125}
    rows = list(csv.reader(io.StringIO(format_compare(summaries, SCENARIOS, fmt="csv"))))
    assert rows[0] == ["metric", "paged", "oracle"]
    assert {len(row) for row in rows} == {3}
    by_label = {row[0]: row[1:] for row in rows}
    assert by_label["TTFT p50 ms"] == ["12.5", ""]
    assert by_label["KV peak used % of pool"] == ["50.0", "50.0"]
    assert by_label["scenario.cache.allocator"] == ["paged", "contiguous-oracle"]
    assert by_label["scenario.cache.block_size"] == ["16", "1"]


def test_format_json_has_runs_metrics_and_scenario_fields():
    paths = {"paged": "a/paged", "oracle": "b/oracle"}
    text = format_compare(paged_and_contiguous(), SCENARIOS, fmt="json", paths=paths)
    document = json.loads(text)
    assert document["runs"] == paths
    assert document["metrics"]["KV peak used slots"] == {"paged": 1600, "oracle": 1600}
    assert document["metrics"]["verdict"] == {"paged": None, "oracle": None}
    assert document["scenario"] == {
        "cache.allocator": {"paged": "paged", "oracle": "contiguous-oracle"},
        "cache.block_size": {"paged": 16, "oracle": 1},
    }


def test_format_markdown_is_two_github_tables():
    text = format_compare(paged_and_contiguous(), SCENARIOS, fmt="markdown")
    metrics, fields = text.split("\n\n")
    assert metrics.splitlines()[:2] == ["| metric | paged | oracle |", "| --- | ---: | ---: |"]
    assert "| KV peak used slots | 1,600 | 1,600 |" in metrics
    assert fields.splitlines()[2] == "| cache.allocator | paged | contiguous-oracle |"
    with pytest.raises(ValueError, match="unknown format"):
        format_compare(paged_and_contiguous(), fmt="xml")


def run_tiny(out: Path, *sets: str, report: bool = False) -> Path:
    args = ["run", str(TINY), "--out", str(out), "--quiet"] + ([] if report else ["--no-report"])
    for item in ("simulation.num_requests=60", *sets):
        args += ["--set", item]
    assert main(args) == 0
    return out


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two tiny runs in folders that share their name: a/measured (paged) and b/measured
    (contiguous-oracle)."""
    root = tmp_path_factory.mktemp("compare")
    run_tiny(root / "a" / "measured")
    run_tiny(root / "b" / "measured", "cache.allocator=contiguous-oracle")
    return root


def test_compare_command_labels_runs_uniquely_and_shows_what_differs(two_runs, capsys):
    runs = [str(two_runs / "a" / "measured"), str(two_runs / "b" / "measured")]
    assert main(["compare", *runs, "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert list(document["runs"]) == ["a/measured", "b/measured"]
    assert document["scenario"]["cache.allocator"] == {
        "a/measured": "paged",
        "b/measured": "contiguous-oracle",
    }
    slots = document["metrics"]["KV pool slots per replica"]
    # tiny: 128 blocks of 16, less the null block of the default vllm-v1 engine
    assert slots["a/measured"] == slots["b/measured"] == 127 * 16
    for fmt in ("table", "csv", "markdown"):
        assert main(["compare", *runs, "--format", fmt]) == 0
        assert "b/measured" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", *runs, "--format", "yaml"])
    assert exit_info.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_compare_html_writes_the_page_and_plotly_js_beside_it(two_runs, capsys, tmp_path):
    runs = [str(two_runs / "a" / "measured"), str(two_runs / "b" / "measured")]
    page = tmp_path / "out" / "compare.html"
    assert main(["compare", *runs, "--html", str(page)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("metric") and f"wrote {page}" in captured.err
    text = page.read_text()
    assert (page.parent / PLOTLY_JS).is_file() and '<script src="plotly.min.js">' in text
    assert text.count("Plotly.newPlot(") == 2
    assert "<td>cache.allocator</td>" in text and "<th class=num>a/measured</th>" in text
    # --plotly-js: a URL is only referenced; nothing is written
    other = tmp_path / "cdn" / "compare.html"
    url = "https://example.org/plotly.min.js"
    assert main(["compare", *runs, "--html", str(other), "--plotly-js", url]) == 0
    assert f'<script src="{url}">' in other.read_text()
    assert not (other.parent / PLOTLY_JS).exists()


def test_compare_html_needs_the_runs_csv_files(two_runs, capsys, tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    (run / "summary.json").write_text((two_runs / "a" / "measured" / "summary.json").read_text())
    assert main(["compare", str(run)]) == 0
    assert main(["compare", str(run), "--html", str(tmp_path / "c.html")]) == 2
    err = capsys.readouterr().err
    assert "requests.csv: not found" in err and len(err.strip().splitlines()) == 1
