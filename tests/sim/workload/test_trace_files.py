"""Hostile trace files, length tables and scenario files: one ScenarioError line naming
the file and line (and the column), never an OverflowError, a UnicodeDecodeError or a
trace whose non-finite times reach requests.csv."""

from __future__ import annotations

import csv
import json
import math

import pytest

from sim.cli import main
from sim.config.errors import ScenarioError
from sim.config.loader import load_scenario
from sim.inputs.tables import LengthTableError, load_length_table
from sim.inputs.textfile import INT64_MAX
from sim.inputs.traces import TraceError, load_trace

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
TINY = """\
model: tiny
hardware: h100-sxm
cache: {block_size: 16, num_blocks: 128}
simulation: {num_requests: 5}
"""


def trace_scenario(tmp_path, name, content, fmt="azure-csv", time_scale=1.0):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        TINY + f"workload: {{arrival: {{kind: trace, format: {fmt}, path: {name}, "
        f"time_scale: {time_scale}}}}}\n"
    )
    return scenario


def table_scenario(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    scenario = tmp_path / "s.yaml"
    scenario.write_text(TINY + f"workload: {{input: {{kind: empirical, path: {name}}}}}\n")
    return scenario


def load_error(path) -> str:
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path))
    return message


def mooncake_line(**row) -> str:
    return json.dumps({"timestamp": 0, "input_length": 9, "output_length": 3, **row}) + "\n"


AZURE_CASES = {
    "nan time": (HEADER + "1,5,5\nnan,5,5\n", "t.csv:3: TIMESTAMP: expected a finite time"),
    "infinite time": (HEADER + "inf,5,5\n", "t.csv:2: TIMESTAMP: expected a finite time"),
    "time overflowing": (HEADER + "1e999,5,5\n", "t.csv:2: TIMESTAMP: expected a finite time"),
    "times too far apart": (
        HEADER + "-1.5e308,5,5\n1.5e308,5,5\n",
        "t.csv:3: TIMESTAMP: too far from the earliest row (line 2)",
    ),
    "year 1": (HEADER + "0001-01-01 00:00:00.5,5,5\n", "t.csv:2: TIMESTAMP: date out of range"),
    "count beyond int64": (
        HEADER + f"1,{INT64_MAX + 1},5\n",
        f"t.csv:2: ContextTokens: expected at most {INT64_MAX}",
    ),
    "count of 5000 digits": (HEADER + "1,5," + "9" * 5000 + "\n", "t.csv:2: GeneratedTokens"),
    "superscript digits": (HEADER + "1,\u00b2,5\n", "t.csv:2: ContextTokens: expected a non-neg"),
    "negative count": (HEADER + "1,-5,5\n", "t.csv:2: ContextTokens: expected a non-negative"),
    "not UTF-8": (HEADER.encode() + b"1,5,5\n2,\xff,5\n", "t.csv:3: not UTF-8 text (byte 0xff)"),
    "field over the csv limit": (HEADER + '1,"' + "5" * 200_000 + '",5\n', "t.csv:2: not CSV"),
}


@pytest.mark.parametrize("case", sorted(AZURE_CASES))
def test_bad_azure_traces_name_the_file_line_and_column(tmp_path, case):
    content, expected = AZURE_CASES[case]
    message = load_error(trace_scenario(tmp_path, "t.csv", content))
    assert "workload.arrival.path" in message and expected in message


MOONCAKE_CASES = {
    "hash id beyond int64": (
        mooncake_line(hash_ids=[1, INT64_MAX + 1]),
        "m.jsonl:1: hash_ids: expected a list of non-negative integers of at most",
    ),
    "hash id a string": (mooncake_line(hash_ids=["7"]), "m.jsonl:1: hash_ids"),
    "length beyond int64": (
        mooncake_line(output_length=2**64),
        f"m.jsonl:1: output_length: expected at most {INT64_MAX}",
    ),
    "time beyond int64": (mooncake_line(timestamp=10**25), "m.jsonl:1: timestamp: expected at"),
    "NaN time": ('{"timestamp": NaN}\n', "m.jsonl:1: timestamp: expected a non-negative integer"),
    "time overflowing": ('{"timestamp": 1e999}\n', "m.jsonl:1: timestamp: expected a non-negative"),
    "5000 digits": ('{"timestamp": ' + "1" * 5000 + "}\n", "m.jsonl:1: expected a JSON object"),
    "nested too deep": ("[" * 50_000 + "]" * 50_000 + "\n", "m.jsonl:1: expected a JSON object"),
    "not UTF-8": (mooncake_line().encode() + b'{"x": "\xe9"}\n', "m.jsonl:2: not UTF-8 text"),
}


@pytest.mark.parametrize("case", sorted(MOONCAKE_CASES))
def test_bad_mooncake_traces_name_the_file_line_and_field(tmp_path, case):
    content, expected = MOONCAKE_CASES[case]
    message = load_error(trace_scenario(tmp_path, "m.jsonl", content, "mooncake-jsonl"))
    assert expected in message


TABLE_CASES = {
    "beyond int64": (f"5\n{INT64_MAX + 1}\n", f"l.txt:2: column 0: expected at most {INT64_MAX}"),
    "5000 digits": ("5\n6 " + "7" * 5000 + "\n", "l.txt:2: column 1: expected at most"),
    "arabic-indic digits": ("5\n\u0667\n", "l.txt:2: column 0: expected a positive integer"),
    "fullwidth digits first": ("\uff15\n", "l.txt:1: column 0: expected a positive integer"),
    "zero": ("5\n0\n", "l.txt:2: column 0: expected a positive integer, got '0'"),
    "not UTF-8": (b"5\n6\n\xfe7\n", "l.txt:3: not UTF-8 text (byte 0xfe)"),
}


@pytest.mark.parametrize("case", sorted(TABLE_CASES))
def test_bad_length_tables_name_the_file_line_and_column(tmp_path, case):
    content, expected = TABLE_CASES[case]
    message = load_error(table_scenario(tmp_path, "l.txt", content))
    assert "workload.input.path" in message and expected in message


def test_the_largest_int64_counts_are_accepted_and_clipped_to_the_model(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER + f"1,{INT64_MAX},{INT64_MAX}\n")
    assert load_trace(trace, "azure-csv").input_len[0] == INT64_MAX
    table = tmp_path / "l.txt"
    table.write_text(f"{INT64_MAX} 5\n")
    assert load_length_table(table)[0, 0] == INT64_MAX
    out = tmp_path / "out"
    code = main(
        [
            "run",
            str(trace_scenario(tmp_path, "t.csv", trace.read_text())),
            "--out",
            str(out),
            "--quiet",
            "--no-report",
        ]
    )
    assert code == 0
    with open(out / "requests.csv", newline="") as f:
        (row,) = csv.DictReader(f)  # (a rejected reason may hold a comma: csv quotes it)
    assert math.isfinite(float(row["arrival_s"]))


def test_a_time_scale_that_makes_arrivals_infinite_is_refused(tmp_path):
    scenario = trace_scenario(tmp_path, "t.csv", HEADER + "0,5,5\n1e300,5,5\n", time_scale=1e10)
    assert "workload.arrival: time_scale 1e+10 puts the trace's last arrival" in load_error(
        scenario
    )
    scenario = trace_scenario(tmp_path, "t.csv", HEADER + "0,5,5\n", time_scale=".inf")
    assert "workload.arrival.time_scale: expected a finite number, got inf" in load_error(scenario)


def test_readers_raise_their_own_error_for_an_unreadable_file(tmp_path):
    with pytest.raises(TraceError, match="is a folder"):
        load_trace(tmp_path, "azure-csv")
    with pytest.raises(LengthTableError, match="cannot read"):
        load_length_table(tmp_path / "missing.txt")


SCENARIO_FILES = {
    "latin-1": (b"name: x\ndescription: caf\xe9\n", "line 2: not UTF-8 text"),
    "utf-16": ("name: x\n".encode("utf-16"), "line 1: not UTF-8 text"),
    "nested too deep": (("description: " + "[" * 20_000 + "]" * 20_000).encode(), "nested too"),
}


@pytest.mark.parametrize("case", sorted(SCENARIO_FILES))
def test_unreadable_scenario_text_is_one_line_exit_2(tmp_path, capsys, case):
    content, expected = SCENARIO_FILES[case]
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    assert expected in load_error(path)
    code = main(["run", str(path), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.count("\n") == 1 and "bad.yaml" in err and expected in err
    assert not (tmp_path / "out").exists()
