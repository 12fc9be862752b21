"""`pagesim profile` / `calibrate`: the grid, the CSV and the commands."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.catalog.presets import MODEL_PRESETS
from sim.cli import main
from sim.costs.calibrated import FEATURES
from sim.hil.profiling import (
    CSV_COLUMNS,
    StepShape,
    default_grid,
    profile,
    read_profile,
    write_profile,
)

TINY = MODEL_PRESETS["tiny"]


@given(
    max_num_seqs=st.integers(1, 64),
    max_batched_tokens=st.integers(1, 2048),
    max_context=st.integers(1, 4096),
    block_size=st.sampled_from([1, 8, 16, 32]),
    quick=st.booleans(),
)
def test_grid_shapes_respect_the_limits(
    max_num_seqs, max_batched_tokens, max_context, block_size, quick
):
    shapes = default_grid(
        max_num_seqs=max_num_seqs,
        max_batched_tokens=max_batched_tokens,
        max_context=max_context,
        block_size=block_size,
        quick=quick,
    )
    assert shapes
    kinds = {shape.kind for shape in shapes}
    assert {"decode", "prefill"} <= kinds
    for shape in shapes:
        tokens = shape.num_decodes + shape.num_chunks * shape.chunk_tokens
        assert shape.num_decodes + shape.num_chunks <= max_num_seqs
        assert 1 <= tokens <= max_batched_tokens or shape.num_chunks == 0
        assert shape.num_decodes <= max_batched_tokens
        if shape.num_decodes:
            assert 1 <= shape.decode_context_min <= shape.decode_context_max <= max_context
        if shape.num_chunks:
            assert shape.chunk_tokens >= 1
            assert shape.chunk_start + shape.chunk_tokens <= max_context


def test_quick_grid_is_smaller():
    assert len(default_grid(quick=True)) < len(default_grid())


def test_grid_rejects_non_positive_limits():
    with pytest.raises(ValueError):
        default_grid(max_num_seqs=0)


def test_decode_contexts_spread_evenly_between_the_bounds():
    contexts = StepShape(5, 16, 80).decode_contexts()
    assert contexts.tolist() == [16, 32, 48, 64, 80]
    assert StepShape(num_chunks=2, chunk_tokens=8, chunk_start=4).chunks() == [(4, 8)] * 2


def test_blocks_needed_counts_every_sequence():
    shape = StepShape(2, 17, 17, 1, 10, 6)  # two decodes of 17, one chunk to 16
    assert shape.blocks_needed(16) == 2 + 2 + 1


SHAPES = [
    StepShape(3, 16, 40),
    StepShape(num_chunks=2, chunk_tokens=12, chunk_start=20),
    StepShape(2, 16, 33, 1, 9, 0),
]


@pytest.fixture(scope="module")
def profile_rows():
    return profile(TINY, SHAPES, block_size=16, warmup=1, repeats=3)


def test_profile_rows_describe_each_shape_and_its_timing(profile_rows):
    assert len(profile_rows) == len(SHAPES)
    for row, shape in zip(profile_rows, SHAPES):
        assert set(row) == set(CSV_COLUMNS)
        assert row["kind"] == shape.kind
        assert row["num_decodes"] == shape.num_decodes and row["chunk_start"] == shape.chunk_start
        assert 0 < row["min_s"] <= row["p10_s"] <= row["median_s"] <= row["p90_s"]
        assert row["repeats"] == 3 and row["device"] == "cpu" and row["model"] == "tiny"
        assert row["torch_version"]


def test_profile_csv_round_trip(profile_rows, tmp_path):
    path = write_profile(profile_rows, tmp_path / "p.csv")
    with path.open() as handle:
        assert next(csv.reader(handle)) == list(CSV_COLUMNS)
    shapes, seconds, meta = read_profile(path, "median_s")
    assert shapes == SHAPES
    np.testing.assert_allclose(seconds, [r["median_s"] for r in profile_rows], rtol=1e-8)
    assert meta["model"] == "tiny" and meta["statistic"] == "median_s"


def test_read_profile_names_the_problem(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("kind,num_decodes\ndecode,1\n")
    with pytest.raises(ValueError, match="missing columns"):
        read_profile(path)
    rows = [dict.fromkeys(CSV_COLUMNS, "1")]
    rows[0]["min_s"] = "fast"
    write_profile(rows, path)
    with pytest.raises(ValueError, match="line 2"):
        read_profile(path)


def test_profile_and_calibrate_commands(tmp_path, capsys):
    csv_path, json_path = tmp_path / "profile.csv", tmp_path / "calibration.json"
    code = main(
        [
            "profile",
            "--model",
            "tiny",
            "--quick",
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--max-context",
            "64",
            "--out",
            str(csv_path),
            "--quiet",
        ]
    )
    assert code == 0
    shapes, seconds, _ = read_profile(csv_path)
    assert len(shapes) > len(FEATURES) and (seconds > 0).all()
    assert main(["calibrate", str(csv_path), "--out", str(json_path)]) == 0
    out = capsys.readouterr().out
    assert "held-out error" in out and "MAPE" in out
    document = json.loads(json_path.read_text())
    assert document["profile"]["model"] == "tiny"
    assert document["fit"]["rows"] == len(shapes)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["profile", "--model", "tinyy"], "unknown model preset"),
        (["profile", "--model", "tiny", "--repeats", "0"], "--repeats must be >= 1"),
        (["calibrate", "missing.csv"], "cannot read"),
    ],
)
def test_user_mistakes_end_in_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def written_profile(path, edit=None, rows=16):
    """A profile CSV of ``rows`` shapes with made-up times; ``edit(records)`` changes
    the text of its records before writing."""
    records = []
    for i in range(rows):
        shape = StepShape(
            num_decodes=1 + i % 4,
            decode_context_min=8 + i,
            decode_context_max=8 + 2 * i,
            num_chunks=i % 2,
            chunk_tokens=4 + i,
        )
        seconds = 1e-3 * (1 + i)
        record = {
            **{c: getattr(shape, c) for c in CSV_COLUMNS if hasattr(shape, c)},
            "kind": shape.kind,
            "min_s": seconds,
            "median_s": seconds,
        }
        records.append({c: str(record.get(c, "")) for c in CSV_COLUMNS})
    if edit is not None:
        edit(records)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(records)
    return path


BAD_PROFILES = {
    "NaN time": (lambda r: r[2].update(min_s="nan"), "line 4: min_s: expected a positive finite"),
    "infinite time": (lambda r: r[0].update(min_s="inf"), "line 2: min_s: expected a positive"),
    "zero time": (lambda r: r[5].update(min_s="0"), "line 7: min_s"),
    "negative shape": (lambda r: r[1].update(num_chunks="-1"), "line 3: num_chunks: expected a"),
    "shape beyond int64": (
        lambda r: r[0].update(chunk_tokens=str(2**64)),
        "line 2: chunk_tokens: expected a non-negative integer of at most",
    ),
    "shape a fraction": (lambda r: r[0].update(num_decodes="1.5"), "line 2: num_decodes"),
}


@pytest.mark.parametrize("case", sorted(BAD_PROFILES))
def test_read_profile_names_the_line_and_column_of_a_bad_value(tmp_path, case):
    edit, message = BAD_PROFILES[case]
    path = written_profile(tmp_path / "p.csv", edit)
    with pytest.raises(ValueError) as err:
        read_profile(path)
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value)


def test_read_profile_refuses_unreadable_text(tmp_path):
    path = written_profile(tmp_path / "p.csv")
    path.write_bytes(path.read_bytes() + b"decode,\xff\n")
    with pytest.raises(ValueError, match=r"p.csv:18: not UTF-8 text \(byte 0xff\)"):
        read_profile(path)
    path.write_text(",".join(CSV_COLUMNS) + '\n"' + "1" * 200_000 + '"\n')
    with pytest.raises(ValueError, match="line 2: not CSV: field larger than field limit"):
        read_profile(path)
    with pytest.raises(ValueError, match="is a folder"):
        read_profile(tmp_path)


def test_calibrate_a_bad_profile_is_one_line_and_writes_nothing(tmp_path, capsys):
    path = written_profile(tmp_path / "p.csv", lambda r: r[3].update(median_s="fast"))
    out = tmp_path / "c.json"
    assert main(["calibrate", str(path), "--statistic", "median_s", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "p.csv: line 5: median_s: expected a positive finite number" in err
    assert err.count("\n") == 1 and not out.exists()
    assert main(["calibrate", str(written_profile(path)), "--out", str(out)]) == 0
    assert out.is_file() and sorted(p.name for p in tmp_path.iterdir()) == ["c.json", "p.csv"]
