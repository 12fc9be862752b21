"""`pagesim compare` on run folders whose files are malformed: one line naming the file
(and the field or line), exit code 2, no traceback, no page written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sim.cli import main
from sim.output.compare import format_compare, scenario_problem, summary_problem
from tests.adversarial.cli import replace_file

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "scenarios" / "tiny.yaml"


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("template") / "run"
    argv = ["run", str(TINY), "--out", str(run), "--quiet", "--no-report"]
    assert main([*argv, "--set", "simulation.num_requests=20"]) == 0
    return run


@pytest.fixture
def run(template, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(template, copy)
    return copy


def summary_with(run: Path, **fields) -> Path:
    summary = json.loads((run / "summary.json").read_text())
    for key, value in fields.items():
        node, *path = key.split("__")
        target = summary
        for part in [node, *path][:-1]:
            target = target.setdefault(part, {})
        target[[node, *path][-1]] = value
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def compare_error(capsys, run: Path, *extra: str) -> str:
    code = main(["compare", str(run), *extra])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert "Traceback" not in captured.err and captured.err.count("\n") == 1, captured.err
    assert captured.out == ""
    return captured.err


SUMMARIES = {
    "a list": ("[1, 2]", "summary.json: (top level): expected a JSON object, got a list"),
    "a text": ('"done"', "summary.json: (top level): expected a JSON object, got a text"),
    "not UTF-8": (b'{"x": "\xff"}', "summary.json:1: not UTF-8 text (byte 0xff)"),
    "a folder": (None, "summary.json: is a folder"),
    "NaN": ('{"throughput_rps": NaN}', "summary.json: not readable JSON: NaN is not a finite"),
    "401 digits": ('{"goodput": ' + "9" * 401 + "}", "not readable JSON: a number of 401 digits"),
    "nested too deep": ("[" * 100_000 + "]" * 100_000, "summary.json: not readable JSON: nested"),
    "not JSON": ('{"a": 1,\n}', "summary.json: line 2: not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(SUMMARIES))
def test_a_summary_that_is_not_a_json_object(run, capsys, case):
    content, message = SUMMARIES[case]
    replace_file(run / "summary.json", content)
    assert message in compare_error(capsys, run)


FIELDS = {
    "text for a count": ({"num_finished": "many"}, 'num_finished: expected a number, got "many"'),
    "boolean for a rate": ({"throughput_rps": True}, "throughput_rps: expected a number, got true"),
    "latency a list": ({"ttft_s": [1, 2]}, "ttft_s: expected a JSON object, got a list"),
    "latency text": ({"e2e_s__p99": "slow"}, "e2e_s.p99: expected a number"),
    "window a number": ({"steady_state": 3}, "steady_state: expected a JSON object, got 3"),
    "window verdict": ({"steady_state__verdict": 1}, "steady_state.verdict: expected a text"),
    "limiter share": (
        {"steady_state__limiters__max_num_seqs": "most"},
        "steady_state.limiters.max_num_seqs: expected a number",
    ),
    "window latency": ({"steady_state__tpot_s__p50": []}, "steady_state.tpot_s.p50: expected"),
    "kv fraction": ({"kv__peak_used_fraction": "1/2"}, "kv.peak_used_fraction: expected a num"),
}


@pytest.mark.parametrize("case", sorted(FIELDS))
def test_a_summary_field_of_the_wrong_type_is_named(run, capsys, case):
    fields, message = FIELDS[case]
    summary_with(run, **fields)
    err = compare_error(capsys, run)
    assert f"{run / 'summary.json'}: {message}" in err


def test_scenario_json_must_be_an_object_with_object_sections(run, capsys):
    replace_file(run / "scenario.json", "[]")
    assert "scenario.json: (top level): expected a JSON object" in compare_error(capsys, run)
    replace_file(run / "scenario.json", json.dumps({"cache": "paged"}))
    assert "scenario.json: cache: expected a JSON object" in compare_error(capsys, run)
    replace_file(run / "scenario.json", None)
    assert "scenario.json: is a folder" in compare_error(capsys, run)


def test_a_run_folder_that_is_a_file(tmp_path, capsys):
    path = tmp_path / "run"
    path.write_text("not a run")
    assert "run: not a folder (compare reads run folders)" in compare_error(capsys, path)


def test_bad_csv_files_name_the_file_and_line_and_write_no_page(run, tmp_path, capsys):
    page = tmp_path / "c.html"
    lines = (run / "requests.csv").read_text().splitlines()
    (run / "requests.csv").write_text("\n".join([*lines[:3], "0,1", *lines[3:]]) + "\n")
    err = compare_error(capsys, run, "--html", str(page))
    assert "requests.csv:4: 2 fields, expected 17" in err
    (run / "requests.csv").write_text("\n".join(lines) + "\n" + "x," * 16 + "\n")
    assert f"requests.csv:{len(lines) + 1}: arrival_s: expected a number, got 'x'" in (
        compare_error(capsys, run, "--html", str(page))
    )
    (run / "requests.csv").write_bytes("\n".join(lines).encode() + b"\n\xfe\n")
    assert "requests.csv:" in compare_error(capsys, run, "--html", str(page))
    (run / "requests.csv").write_text("\n".join(lines) + "\n")
    replace_file(run / "steps.csv", None)
    assert "steps.csv: is a folder" in compare_error(capsys, run, "--html", str(page))
    assert not page.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_every_file_pagesim_writes_passes_the_checks(template):
    summary = json.loads((template / "summary.json").read_text())
    assert summary_problem(summary) == ""
    assert scenario_problem(json.loads((template / "scenario.json").read_text())) == ""


def test_json_output_spells_out_an_infinite_scenario_value(template):
    summary = json.loads((template / "summary.json").read_text())
    scenarios = {"a": {"slo": {"ttft_s": float("inf")}}, "b": {"slo": {"ttft_s": 2.0}}}
    text = format_compare({"a": summary, "b": summary}, scenarios, fmt="json")
    assert json.loads(text)["scenario"]["slo.ttft_s"] == {"a": "inf", "b": 2.0}
