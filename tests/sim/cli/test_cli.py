"""`pagesim run` end to end: outputs, determinism, and one-line errors for bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sim.cli import main

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "scenarios" / "tiny.yaml"
OUTPUTS = ("requests.csv", "steps.csv", "summary.json")


def run_cli(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_run_writes_outputs_and_prints_the_summary(tmp_path, capsys):
    code, out, err = run_cli(capsys, "run", str(TINY), "--out", str(tmp_path / "r"))
    assert code == 0, err
    for name in (*OUTPUTS, "scenario.json", "report.html"):
        assert (tmp_path / "r" / name).is_file(), name
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    requests = int(re.search(r"num_requests: (\d+)", TINY.read_text())[1])  # (as shipped)
    assert summary["num_finished"] + summary["num_rejected"] == summary["num_requests"] == requests
    assert "TTFT" in out and "goodput" in out


def test_same_scenario_and_seed_give_byte_identical_outputs(tmp_path, capsys):
    for name in ("a", "b"):
        assert (
            main(["run", str(TINY), "--out", str(tmp_path / name), "--quiet", "--no-report"]) == 0
        )
    for name in OUTPUTS:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    main(["run", str(TINY), "--out", str(tmp_path / "c"), "--quiet", "--no-report", "--seed", "7"])
    assert (tmp_path / "a" / "requests.csv").read_bytes() != (
        tmp_path / "c" / "requests.csv"
    ).read_bytes()


def test_set_overrides_reach_the_run(tmp_path, capsys):
    code, _, err = run_cli(
        capsys,
        "run",
        str(TINY),
        "--out",
        str(tmp_path / "r"),
        "--quiet",
        "--no-report",
        "--set",
        "simulation.num_requests=20",
        "--set",
        "cache.allocator=contiguous-oracle",
    )
    assert code == 0, err
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["num_requests"] == 20
    # The oracle reserves each request's exact length: reserved slots, no waste. Paged
    # (the file's allocator) would reserve nothing.
    assert summary["kv"]["reserved"] > 0 and summary["kv"]["internal_frag"] == 0


def write(tmp_path, text, name="bad.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


BAD_SCENARIOS = {
    "unknown policy": ("scheduler: {policy: fcfz}\n", "scheduler.policy"),
    "negative rate": ("workload: {arrival: {kind: poisson, rate_rps: -3}}\n", "rate_rps"),
    "misspelt field": ("schedular: {policy: fcfs}\n", "schedular"),
    "wrong type": ("cache: {block_size: many}\n", "cache.block_size"),
    "yaml syntax": ("cache: {block_size: 16\nmodel: [\n", "line"),
    "preset not a name": ("model: {preset: [1]}\n", "model"),
    "missing trace": (
        "workload: {arrival: {kind: trace, path: nowhere.csv, format: azure-csv}}\n",
        "nowhere.csv",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SCENARIOS))
def test_bad_scenario_is_one_line_exit_2_no_traceback(tmp_path, capsys, case):
    text, field = BAD_SCENARIOS[case]
    path = write(tmp_path, text)
    code, out, err = run_cli(capsys, "run", str(path), "--out", str(tmp_path / "o"))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert str(path) in lines[0] and field in lines[0]
    assert "Traceback" not in err and not (tmp_path / "o").exists()


def test_bad_trace_row_names_file_line_and_column(tmp_path, capsys):
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,lots,15\n"
    )
    path = write(
        tmp_path, "workload: {arrival: {kind: trace, path: trace.csv, format: azure-csv}}\n"
    )
    code, _, err = run_cli(capsys, "run", str(path))
    assert code == 2
    assert "trace.csv:3: ContextTokens" in err
    assert len(err.strip().splitlines()) == 1


def test_bad_override_and_missing_file(tmp_path, capsys):
    code, _, err = run_cli(capsys, "run", str(TINY), "--set", "cache.blok_size=8")
    assert code == 2 and "blok_size" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(capsys, "run", str(tmp_path / "absent.yaml"))
    assert code == 2 and "absent.yaml" in err


def test_compare_prints_runs_side_by_side(tmp_path, capsys):
    for name, allocator in (("paged", "paged"), ("oracle", "contiguous-oracle")):
        main(
            [
                "run",
                str(TINY),
                "--out",
                str(tmp_path / name),
                "--quiet",
                "--no-report",
                "--set",
                f"cache.allocator={allocator}",
            ]
        )
    code, out, _ = run_cli(capsys, "compare", str(tmp_path / "paged"), str(tmp_path / "oracle"))
    assert code == 0 and "paged" in out and "oracle" in out
    code, _, err = run_cli(capsys, "compare", str(tmp_path / "nothing"))
    assert code == 2 and "summary.json" in err


def test_an_output_path_that_cannot_be_a_directory_fails_before_the_run(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code, _, err = run_cli(capsys, "run", str(TINY), "--out", str(blocker / "run"), "--quiet")
    assert code == 2 and "output directory" in err and len(err.strip().splitlines()) == 1
