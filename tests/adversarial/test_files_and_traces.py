"""Hostile files and traces through the real command line (issue 14, "files and traces").

Each case builds its inputs in a folder of its own and names the culprit the error line
must mention. Every command runs in a subprocess (tests/adversarial/cli.py), all cases
at once on a few workers; each case's test then checks the promise: exit code 2, no
traceback, one stderr line naming the culprit, and nothing in the case's folder created,
changed or removed (no output file, no half-written run, no temporary leftover).

Families: trace files (Azure CSV, Mooncake JSONL), length tables, scenario files, output
paths, compare's inputs, calibration files, profile CSVs and numeric options.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.adversarial.cli import (
    TINY_SCENARIO,
    Build,
    one_line_error,
    replace_file,
    run_cases,
)

INT64_MAX = 2**63 - 1
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
TINY_SHAPE = "L2-h64-H4-kv2-d16-i128-v512"  # model_shape_key of the tiny preset

#: A case: (family, build); build(folder) writes the inputs and returns the command's
#: arguments and the culprits its error line must name.
CASES: dict[str, tuple[str, Build]] = {}
#: Cases that need file permissions root ignores.
NEEDS_PERMISSIONS: set[str] = set()


def case(family: str, *, permissions: bool = False):
    def register(build: Build) -> Build:
        name = f"{family}: {build.__name__.replace('_', ' ')}"
        CASES[name] = (family, build)
        if permissions:
            NEEDS_PERMISSIONS.add(name)
        return build

    return register


def scenario(folder: Path, name: str = "s.yaml", **sections) -> Path:
    """A tiny scenario with ``sections`` replacing TINY_SCENARIO's (``workload`` merged)."""
    raw = json.loads(json.dumps(TINY_SCENARIO))
    raw["workload"].update(sections.pop("workload", {}))
    raw.update(sections)
    path = folder / name
    path.write_text(yaml.safe_dump(raw))
    return path


def run_args(folder: Path, path: Path) -> list[str]:
    return ["run", str(path), "--out", str(folder / "out"), "--quiet", "--no-report"]


def trace_run(folder: Path, name: str, content: str | bytes, fmt: str) -> list[str]:
    trace = folder / name
    if isinstance(content, str):
        trace.write_text(content)
    else:
        trace.write_bytes(content)
    arrival = {"kind": "trace", "format": fmt, "path": name}
    return run_args(folder, scenario(folder, workload={"arrival": arrival}))


def table_run(folder: Path, name: str, content: str | bytes) -> list[str]:
    table = folder / name
    if isinstance(content, str):
        table.write_text(content)
    else:
        table.write_bytes(content)
    lengths = {"input": {"kind": "empirical", "path": name}}
    return run_args(folder, scenario(folder, workload=lengths))


def mooncake(**row) -> str:
    base = {"timestamp": 0, "input_length": 100, "output_length": 10, "hash_ids": [1]}
    return json.dumps(base) + "\n" + json.dumps({**base, **row}) + "\n"


# --------------------------------------------------------------------------- traces


_ROW = '{"arrival_s": 0, "input_tokens": 40, "output_tokens": 2'


@case("trace")
def requests_row_with_a_prompt_key_and_hash_ids(d):
    text = _ROW + ', "prompt": "a", "hash_ids": [1, 2]}\n'
    return trace_run(d, "both.jsonl", text, "requests-jsonl"), ["both.jsonl:1", "hash_ids"]


@case("trace")
def requests_rows_mixing_prompt_keys_and_hash_ids(d):
    text = _ROW + ', "hash_ids": [1, 2]}\n' + _ROW + ', "prompt": "a"}\n'
    return trace_run(d, "mixed.jsonl", text, "requests-jsonl"), ["mixed.jsonl:2", "prompt"]


@case("trace")
def requests_hash_ids_negative(d):
    text = _ROW + ', "hash_ids": [1, -2]}\n'
    return trace_run(d, "neg.jsonl", text, "requests-jsonl"), ["neg.jsonl:1", "hash_ids"]


@case("trace")
def azure_nan_timestamp(d):
    return trace_run(d, "nan.csv", AZURE_HEADER + "nan,10,10\n", "azure-csv"), [
        "nan.csv:2",
        "TIMESTAMP",
    ]


@case("trace")
def azure_infinite_timestamp(d):
    text = AZURE_HEADER + "1.0,10,10\n-inf,10,10\n"
    return trace_run(d, "inf.csv", text, "azure-csv"), ["inf.csv:3", "TIMESTAMP"]


@case("trace")
def azure_timestamp_overflowing_to_infinity(d):
    text = AZURE_HEADER + "1.0,10,10\n1e400,10,10\n"
    return trace_run(d, "big-time.csv", text, "azure-csv"), ["big-time.csv:3", "TIMESTAMP"]


@case("trace")
def azure_timestamps_too_far_apart(d):
    text = AZURE_HEADER + "-1e308,10,10\n1e308,10,10\n"
    return trace_run(d, "span.csv", text, "azure-csv"), ["span.csv:3", "TIMESTAMP"]


@case("trace")
def azure_date_out_of_range(d):
    text = AZURE_HEADER + "0001-01-01 00:00:00.000,10,10\n"
    return trace_run(d, "year1.csv", text, "azure-csv"), ["year1.csv:2", "TIMESTAMP"]


@case("trace")
def azure_token_count_beyond_int64(d):
    text = AZURE_HEADER + f"1.0,{INT64_MAX + 1},10\n"
    return trace_run(d, "huge.csv", text, "azure-csv"), ["huge.csv:2", "ContextTokens"]


@case("trace")
def azure_token_count_of_5000_digits(d):
    text = AZURE_HEADER + "1.0,10," + "9" * 5000 + "\n"
    return trace_run(d, "digits.csv", text, "azure-csv"), ["digits.csv:2", "GeneratedTokens"]


@case("trace")
def azure_token_count_in_superscript_digits(d):
    text = AZURE_HEADER + "1.0,\u00b2\u00b3,10\n"
    return trace_run(d, "sup.csv", text, "azure-csv"), ["sup.csv:2", "ContextTokens"]


@case("trace")
def azure_not_utf8(d):
    data = AZURE_HEADER.encode() + b"1.0,10,10\n2.0,1\xff0,10\n"
    return trace_run(d, "latin.csv", data, "azure-csv"), ["latin.csv:3", "UTF-8"]


@case("trace")
def azure_field_over_the_csv_limit(d):
    text = AZURE_HEADER + '1.0,"' + "1" * 200_000 + '",10\n'
    return trace_run(d, "wide.csv", text, "azure-csv"), ["wide.csv:2"]


@case("trace")
def mooncake_hash_id_beyond_int64(d):
    text = mooncake(hash_ids=[1, INT64_MAX + 1])
    return trace_run(d, "hash.jsonl", text, "mooncake-jsonl"), ["hash.jsonl:2", "hash_ids"]


@case("trace")
def mooncake_input_length_beyond_int64(d):
    text = mooncake(input_length=2**64)
    return trace_run(d, "len.jsonl", text, "mooncake-jsonl"), ["len.jsonl:2", "input_length"]


@case("trace")
def mooncake_timestamp_beyond_int64(d):
    text = mooncake(timestamp=10**30)
    return trace_run(d, "ts.jsonl", text, "mooncake-jsonl"), ["ts.jsonl:2", "timestamp"]


@case("trace")
def mooncake_nan_timestamp(d):
    text = mooncake().splitlines()[0] + "\n" + '{"timestamp": NaN, "input_length": 5}\n'
    return trace_run(d, "nan.jsonl", text, "mooncake-jsonl"), ["nan.jsonl:2", "timestamp"]


@case("trace")
def mooncake_number_of_5000_digits(d):
    text = '{"timestamp": 0, "input_length": ' + "7" * 5000 + ', "output_length": 1}\n'
    return trace_run(d, "long.jsonl", text, "mooncake-jsonl"), ["long.jsonl:1"]


@case("trace")
def mooncake_not_utf8(d):
    data = mooncake().encode() + b'{"timestamp": 9, "note": "\xe9"}\n'
    return trace_run(d, "enc.jsonl", data, "mooncake-jsonl"), ["enc.jsonl:3", "UTF-8"]


@case("trace")
def mooncake_nested_too_deep(d):
    text = mooncake().splitlines()[0] + "\n" + "[" * 100_000 + "]" * 100_000 + "\n"
    return trace_run(d, "deep.jsonl", text, "mooncake-jsonl"), ["deep.jsonl:2"]


# --------------------------------------------------------------------- length tables


@case("table")
def length_beyond_int64(d):
    return table_run(d, "big.txt", f"12\n{INT64_MAX + 1}\n"), ["big.txt:2"]


@case("table")
def length_of_5000_digits(d):
    return table_run(d, "digits.txt", "12\n" + "9" * 5000 + "\n"), ["digits.txt:2"]


@case("table")
def length_in_arabic_indic_digits(d):
    return table_run(d, "arabic.txt", "12\n\u0661\u0662\n"), ["arabic.txt:2"]


@case("table")
def length_table_not_utf8(d):
    return table_run(d, "enc.txt", b"12\n13\n1\xfe4\n"), ["enc.txt:3", "UTF-8"]


@case("table")
def second_column_beyond_int64(d):
    return table_run(d, "pairs.csv", f"input,output\n12,5\n30,{2**70}\n"), ["pairs.csv:3"]


# ------------------------------------------------------------------- scenario files


@case("scenario")
def scenario_not_utf8(d):
    path = d / "latin1.yaml"
    path.write_bytes(yaml.safe_dump(TINY_SCENARIO).encode() + b"description: caf\xe9\n")
    return run_args(d, path), ["latin1.yaml", "UTF-8"]


@case("scenario")
def scenario_in_utf16(d):
    path = d / "wide.yaml"
    path.write_bytes(yaml.safe_dump(TINY_SCENARIO).encode("utf-16"))
    return run_args(d, path), ["wide.yaml", "UTF-8"]


@case("scenario")
def scenario_nested_too_deep(d):
    path = d / "deep.yaml"
    path.write_text("description: " + "[" * 20_000 + "]" * 20_000 + "\n")
    return run_args(d, path), ["deep.yaml"]


@case("scenario")
def trace_path_too_long_for_the_file_system(d):
    arrival = {"kind": "trace", "path": "t" * 5000 + ".csv", "format": "azure-csv"}
    return run_args(d, scenario(d, workload={"arrival": arrival})), ["arrival.path", "too long"]


@case("scenario")
def scenario_is_a_folder(d):
    (d / "folder.yaml").mkdir()
    return run_args(d, d / "folder.yaml"), ["folder.yaml"]


@case("scenario")
def scenario_is_a_fifo(d):
    os.mkfifo(d / "pipe.yaml")  # the open would wait for a writer forever
    return run_args(d, d / "pipe.yaml"), ["pipe.yaml", "not a regular file"]


@case("scenario")
def scenario_is_dev_zero(d):
    (d / "zero.yaml").symlink_to("/dev/zero")  # the read would never end
    return run_args(d, d / "zero.yaml"), ["zero.yaml", "not a regular file"]


@case("scenario")
def scenario_of_three_gigabytes(d):
    path = d / "huge.yaml"
    with path.open("wb") as handle:  # sparse: no disk used
        handle.truncate(3 << 30)
    return run_args(d, path), ["huge.yaml", "bytes"]


@case("scenario")
def sweep_spec_is_a_fifo(d):
    os.mkfifo(d / "sweep.yaml")
    return ["sweep", str(d / "sweep.yaml"), "--out", str(d / "out")], ["sweep.yaml", "regular"]


@case("scenario")
def capacity_base_is_a_fifo(d):
    os.mkfifo(d / "base.yaml")
    return ["capacity", str(d / "base.yaml"), "--out", str(d / "out")], ["base.yaml", "regular"]


# --------------------------------------------------------------------- output paths


def a_file(folder: Path, name: str = "taken") -> Path:
    path = folder / name
    path.write_text("someone's file\n")
    return path


@case("output")
def run_out_is_a_file(d):
    return ["run", str(scenario(d)), "--out", str(a_file(d)), "--quiet"], ["taken"]


@case("output")
def run_out_under_a_file(d):
    return ["run", str(scenario(d)), "--out", str(a_file(d) / "run"), "--quiet"], ["taken"]


@case("output")
def run_out_is_a_broken_link(d):
    (d / "link").symlink_to(d / "nowhere" / "run")
    return ["run", str(scenario(d)), "--out", str(d / "link"), "--quiet"], ["link"]


@case("output", permissions=True)
def run_out_under_a_read_only_folder(d):
    (d / "locked").mkdir(mode=0o555)
    args = ["run", str(scenario(d)), "--out", str(d / "locked" / "run"), "--quiet"]
    return args, ["locked"]


@case("output")
def profile_out_is_a_folder(d):
    (d / "prof").mkdir()
    args = ["profile", "--model", "tiny", "--quick", "--quiet", "--out", str(d / "prof")]
    return args, ["prof"]


@case("output")
def profile_out_under_a_file(d):
    out = a_file(d) / "p.csv"
    return ["profile", "--model", "tiny", "--quick", "--quiet", "--out", str(out)], ["taken"]


@case("output")
def calibrate_out_is_a_folder(d):
    (d / "cal.json").mkdir()
    return ["calibrate", str(profile_csv(d)), "--out", str(d / "cal.json")], ["cal.json"]


@case("output")
def calibrate_out_under_a_file(d):
    out = a_file(d) / "cal.json"
    return ["calibrate", str(profile_csv(d)), "--out", str(out)], ["taken"]


@case("output")
def validate_out_is_a_file(d):
    args = ["validate", str(scenario(d)), "--calibration", str(calibration(d))]
    return [*args, "--out", str(a_file(d)), "--quiet"], ["taken"]


@case("output")
def schema_out_is_a_folder(d):
    (d / "schema.json").mkdir()
    return ["schema", "--out", str(d / "schema.json")], ["schema.json"]


@case("output")
def schema_out_under_a_file(d):
    return ["schema", "--out", str(a_file(d) / "schema.json")], ["taken"]


@case("output", permissions=True)
def schema_out_under_a_read_only_folder(d):
    (d / "locked").mkdir(mode=0o555)
    return ["schema", "--out", str(d / "locked" / "schema.json")], ["locked"]


@case("output")
def init_out_is_a_folder_even_with_force(d):
    (d / "new.yaml").mkdir()
    return ["init", "new", "--out", str(d / "new.yaml"), "--force"], ["new.yaml"]


@case("output")
def init_out_under_a_file(d):
    return ["init", "new", "--out", str(a_file(d) / "new.yaml")], ["taken"]


@case("output")
def init_name_that_breaks_the_yaml(d):
    return ["init", "a: b", "--out", str(d / "x.yaml")], ["a: b"]


@case("output")
def compare_html_under_a_file(d):
    run = copy_run(d)
    return ["compare", str(run), "--html", str(a_file(d) / "c.html")], ["taken"]


@case("output")
def compare_plotly_js_under_a_file(d):
    run = copy_run(d)
    js = a_file(d, "assets") / "plotly.min.js"
    return ["compare", str(run), "--html", str(d / "c.html"), "--plotly-js", str(js)], ["assets"]


# ----------------------------------------------------------------- compare's inputs

#: A finished tiny run (run.py's --no-report output), made once; cases copy it.
RUN_TEMPLATE: list[Path] = []


def copy_run(folder: Path) -> Path:
    target = folder / "run"
    shutil.copytree(RUN_TEMPLATE[0], target)
    return target


def corrupt(folder: Path, name: str, content: str | bytes | None) -> Path:
    """A copy of the template run with ``name`` replaced (None: by a folder)."""
    run = copy_run(folder)
    replace_file(run / name, content)
    return run


def with_summary(folder: Path, **fields) -> Path:
    summary = json.loads((RUN_TEMPLATE[0] / "summary.json").read_text())
    summary.update(fields)
    return corrupt(folder, "summary.json", json.dumps(summary))


@case("compare")
def summary_is_a_list(d):
    return ["compare", str(corrupt(d, "summary.json", "[1, 2]"))], ["summary.json"]


@case("compare")
def summary_is_a_string(d):
    return ["compare", str(corrupt(d, "summary.json", '"done"'))], ["summary.json"]


@case("compare")
def summary_not_utf8(d):
    run = corrupt(d, "summary.json", b'{"num_requests": "\xff"}')
    return ["compare", str(run)], ["summary.json", "UTF-8"]


@case("compare")
def summary_is_a_folder(d):
    return ["compare", str(corrupt(d, "summary.json", None))], ["summary.json"]


@case("compare")
def summary_string_where_a_number_belongs(d):
    run = with_summary(d, num_finished="many")
    return ["compare", str(run)], ["summary.json", "num_finished"]


@case("compare")
def summary_latency_not_a_mapping(d):
    run = with_summary(d, steady_state={"ttft_s": [1, 2]})
    return ["compare", str(run)], ["summary.json", "steady_state.ttft_s"]


@case("compare")
def summary_number_too_big_for_a_float(d):
    run = with_summary(d, throughput_rps=10**400)
    return ["compare", str(run)], ["summary.json", "401 digits"]


@case("compare")
def summary_nested_too_deep(d):
    run = corrupt(d, "summary.json", "[" * 100_000 + "]" * 100_000)
    return ["compare", str(run)], ["summary.json"]


@case("compare")
def scenario_json_is_a_list(d):
    return ["compare", str(corrupt(d, "scenario.json", "[]"))], ["scenario.json"]


@case("compare")
def scenario_json_cache_is_a_string(d):
    scenario_json = json.loads((RUN_TEMPLATE[0] / "scenario.json").read_text())
    scenario_json["cache"] = "paged"
    run = corrupt(d, "scenario.json", json.dumps(scenario_json))
    return ["compare", str(run)], ["scenario.json", "cache"]


@case("compare")
def requests_csv_row_too_short(d):
    text = (RUN_TEMPLATE[0] / "requests.csv").read_text().splitlines()
    run = corrupt(d, "requests.csv", "\n".join([*text[:3], "0,1", *text[3:]]) + "\n")
    return ["compare", str(run), "--html", str(d / "c.html")], ["requests.csv:4"]


@case("compare")
def requests_csv_not_utf8(d):
    data = (RUN_TEMPLATE[0] / "requests.csv").read_bytes() + b"\xff\xfe\n"
    run = corrupt(d, "requests.csv", data)
    return ["compare", str(run), "--html", str(d / "c.html")], ["requests.csv", "UTF-8"]


@case("compare")
def steps_csv_is_a_folder(d):
    run = corrupt(d, "steps.csv", None)
    return ["compare", str(run), "--html", str(d / "c.html")], ["steps.csv"]


@case("compare")
def run_folder_is_a_file(d):
    return ["compare", str(a_file(d, "run"))], ["run"]


# ---------------------------------------------------------------- calibration files


#: A value in calibration()'s changes that removes the key instead.
DROP = object()


def calibration(folder: Path, file_name: str = "cal.json", **changes) -> Path:
    """A valid calibration of the tiny model, with ``changes`` to its top level (a
    ``coefficients`` dict is merged; a :data:`DROP` value removes the key)."""
    from sim.costs.calibrated import FEATURES

    document = {
        "format": "pagesim-calibration",
        "version": 1,
        "coefficients": dict.fromkeys(FEATURES, 1e-6),
        "fit": {},
        "profile": {"model_shape": TINY_SHAPE},
    }
    document["coefficients"].update(changes.pop("coefficients", {}))
    document.update(changes)
    for section in (document, document["coefficients"]):
        for key in [k for k, v in section.items() if v is DROP]:
            del section[key]
    path = folder / file_name
    path.write_text(json.dumps(document))
    return path


def calibrated_run(folder: Path, path: Path) -> list[str]:
    cost_model = {"kind": "calibrated", "file": path.name}
    return run_args(folder, scenario(folder, cost_model=cost_model))


@case("calibration")
def infinite_coefficient(d):
    path = calibration(d, coefficients={"tokens": float("inf")})
    return calibrated_run(d, path), ["cal.json", "coefficients.tokens"]


@case("calibration")
def coefficient_overflowing_to_infinity(d):
    path = d / "cal.json"
    path.write_text(calibration(d).read_text().replace('"step": 1e-06', '"step": 1e999'))
    return calibrated_run(d, path), ["cal.json", "coefficients.step"]


@case("calibration")
def coefficient_is_a_string(d):
    path = calibration(d, coefficients={"seqs": "fast"})
    return calibrated_run(d, path), ["cal.json", "coefficients.seqs"]


@case("calibration")
def coefficient_is_a_boolean(d):
    path = calibration(d, coefficients={"seqs": True})
    return calibrated_run(d, path), ["cal.json", "coefficients.seqs"]


@case("calibration")
def coefficient_missing(d):
    path = calibration(d, coefficients={"decode_context": DROP})
    return calibrated_run(d, path), ["cal.json", "coefficients.decode_context"]


@case("calibration")
def coefficients_are_a_list(d):
    path = calibration(d)
    document = json.loads(path.read_text())
    path.write_text(json.dumps({**document, "coefficients": [1e-6, 1e-6]}))
    return calibrated_run(d, path), ["cal.json", "coefficients"]


@case("calibration")
def fit_is_a_list(d):
    return calibrated_run(d, calibration(d, fit=[1, 2])), ["cal.json", "fit"]


@case("calibration")
def profile_is_a_string(d):
    return calibrated_run(d, calibration(d, profile="cpu")), ["cal.json", "profile"]


@case("calibration")
def version_missing(d):
    return calibrated_run(d, calibration(d, version=DROP)), ["cal.json", "version"]


@case("calibration")
def calibration_not_utf8(d):
    path = calibration(d)
    path.write_bytes(path.read_bytes().replace(b'"fit": {}', b'"fit": {"n\xe9": 1}'))
    return calibrated_run(d, path), ["cal.json", "UTF-8"]


@case("calibration")
def validate_with_a_negative_coefficient(d):
    path = calibration(d, coefficients={"copied_blocks": -1.0})
    args = ["validate", str(scenario(d)), "--calibration", str(path), "--quiet"]
    return [*args, "--out", str(d / "v")], ["cal.json", "coefficients.copied_blocks"]


# --------------------------------------------------------------------- profile CSVs


def profile_csv(folder: Path, name: str = "prof.csv", edit=None) -> Path:
    """A profile of 40 shapes of the tiny model timed by a made-up linear model (enough
    to fit); ``edit(rows)`` changes the rows (dicts of text) before writing."""
    from sim.hil.profiling import CSV_COLUMNS, StepShape

    rows = []
    for i in range(40):
        shape = StepShape(
            num_decodes=i % 5,
            decode_context_min=16 + i,
            decode_context_max=16 + 3 * i,
            num_chunks=(i // 5) % 3,
            chunk_tokens=8 + 4 * (i % 7),
            chunk_start=16 * (i % 4),
        )
        if not shape.num_decodes and not shape.num_chunks:
            continue
        seconds = float(shape.features() @ np.linspace(1e-6, 1e-4, len(shape.features())))
        row = {c: "" for c in CSV_COLUMNS}
        row.update({k: str(getattr(shape, k)) for k in CSV_COLUMNS if hasattr(shape, k)})
        row.update(min_s=seconds, median_s=seconds, p10_s=seconds, p90_s=seconds, repeats=3)
        row.update(device="cpu", dtype="float32", model="tiny", model_shape=TINY_SHAPE)
        rows.append({k: str(v) for k, v in row.items()})
    if edit is not None:
        edit(rows)
    path = folder / name
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return path


def calibrate_args(folder: Path, path: Path) -> list[str]:
    return ["calibrate", str(path), "--out", str(folder / "cal.json")]


@case("profile")
def profile_not_utf8(d):
    path = profile_csv(d)
    path.write_bytes(path.read_bytes() + b"caf\xe9\n")
    return calibrate_args(d, path), ["prof.csv", "UTF-8"]


@case("profile")
def profile_nan_time(d):
    path = profile_csv(d, edit=lambda rows: rows[3].update(min_s="nan"))
    return calibrate_args(d, path), ["prof.csv", "line 5", "min_s"]


@case("profile")
def profile_negative_shape(d):
    path = profile_csv(d, edit=lambda rows: rows[0].update(num_decodes="-4"))
    return calibrate_args(d, path), ["prof.csv", "line 2", "num_decodes"]


@case("profile")
def profile_shape_beyond_int64(d):
    path = profile_csv(d, edit=lambda rows: rows[1].update(chunk_tokens=str(2**64)))
    return calibrate_args(d, path), ["prof.csv", "line 3", "chunk_tokens"]


@case("profile")
def profile_row_too_short(d):
    path = profile_csv(d)
    path.write_text(path.read_text() + "decode,1\n")
    return calibrate_args(d, path), ["prof.csv"]


# ------------------------------------------------------------------ numeric options


@case("option")
def profile_negative_warmup(d):
    args = ["profile", "--model", "tiny", "--warmup", "-1", "--out", str(d / "p.csv")]
    return args, ["--warmup"]


@case("option")
def validate_negative_warmup(d):
    args = ["validate", str(scenario(d)), "--calibration", str(calibration(d))]
    return [*args, "--warmup", "-1", "--out", str(d / "v")], ["--warmup"]


@case("option")
def profile_max_context_beyond_the_model(d):
    args = ["profile", "--model", "tiny", "--max-context", "100000", "--out", str(d / "p.csv")]
    return args, ["--max-context"]


@case("option")
def profile_negative_seed(d):
    args = ["profile", "--model", "tiny", "--seed", "-1", "--out", str(d / "p.csv")]
    return args, ["--seed"]


@case("option")
def profile_a_billion_threads(d):
    args = ["profile", "--model", "tiny", "--threads", str(10**9), "--out", str(d / "p.csv")]
    return args, ["--threads"]


@case("option")
def check_allocator_negative_steps(d):
    return ["check-allocator", "paged", "--steps", "-3"], ["--steps"]


@case("option")
def run_percentiles_not_finite(d):
    args = run_args(d, scenario(d))
    return [*args, "--metric-percentiles", "50,nan"], ["--metric-percentiles"]


# ---------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Every case built in its own folder and run, all at once (run_cases)."""
    from sim.cli import main

    template = tmp_path_factory.mktemp("template") / "run"
    args = ["run", str(scenario(template.parent)), "--out", str(template)]
    assert main([*args, "--quiet", "--no-report"]) == 0
    RUN_TEMPLATE[:] = [template]
    root = os.geteuid() == 0 if hasattr(os, "geteuid") else False
    builds = {
        name: build
        for name, (_, build) in CASES.items()
        if not (root and name in NEEDS_PERMISSIONS)
    }
    return run_cases(builds, lambda: tmp_path_factory.mktemp("case"))


def test_there_are_enough_cases_in_every_family():
    families = [family for family, _ in CASES.values()]
    assert len(CASES) - len(NEEDS_PERMISSIONS) >= 40
    assert [f for f in set(families) if families.count(f) < 4] == []


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_input_is_one_line_exit_2_and_writes_nothing(results, name):
    if name not in results:
        pytest.skip("root ignores file permissions")
    outcome = results[name]
    assert one_line_error(outcome.result, *outcome.culprits) == ""
    assert outcome.after == outcome.before, "the failed command created, changed or removed files"
