"""``pagesim calibrate --observed`` (and ``--holdout``) on recorded-run folders damaged
one way each: one line naming the file and the key, exit code 2, nothing written, before
any simulation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.adversarial.cli import ROOT, one_line_error, run_cases

CORPUS = ROOT / "validation" / "recorded" / "runs"
PER_REQUEST = CORPUS / "rtx4090-llama-3.1-8b"  # requests.csv, no stage figures
STAGED = CORPUS / "h100-llama-2-7b-general"  # published stage figures


def _edit_json(name, change):
    def edit(run: Path) -> None:
        data = json.loads((run / name).read_text())
        change(data)
        (run / name).write_text(json.dumps(data))

    return edit


def _case(source: Path, edit, culprits, holdout: bool = False):
    def build(folder: Path):
        run = folder / "run"
        shutil.copytree(source, run)
        edit(run)
        where = ["--holdout", str(run)] if holdout else []
        observed = str(run if not holdout else CORPUS / "rtx4090-llama-3.1-8b-seqs128")
        argv = [
            "calibrate",
            "--observed",
            observed,
            *where,
            "--out",
            str(folder / "cal.yaml"),
            "--max-evaluations",
            "1",
        ]
        return argv, culprits

    return build


def _cut_half(name):
    def edit(run: Path) -> None:
        data = (run / name).read_bytes()
        (run / name).write_bytes(data[: len(data) // 2])

    return edit


CASES = {
    "no scenario.yaml": _case(
        PER_REQUEST, lambda r: (r / "scenario.yaml").unlink(), ["scenario.yaml", "cannot read"]
    ),
    "no scenario.json": _case(
        PER_REQUEST, lambda r: (r / "scenario.json").unlink(), ["scenario.json", "cannot read"]
    ),
    "garbage YAML": _case(
        PER_REQUEST,
        lambda r: (r / "scenario.yaml").write_text("a: [b\n  c:"),
        ["scenario.yaml", "not YAML"],
    ),
    "a scenario that is not valid": _case(
        PER_REQUEST,
        lambda r: (r / "scenario.yaml").write_text("cache: {block_size: -1}\n"),
        ["scenario.yaml", "cache.block_size"],
    ),
    "requests.csv cut in half": _case(PER_REQUEST, _cut_half("requests.csv"), ["requests.csv"]),
    "recorded as a string": _case(
        PER_REQUEST,
        _edit_json("summary.json", lambda d: d.update(recorded="yes")),
        ["summary.json", "recorded", "expected an object"],
    ),
    "a stage without sent": _case(
        STAGED,
        _edit_json("summary.json", lambda d: d["recorded"]["stages"][0].pop("sent")),
        ["summary.json", "recorded.stages[0].sent"],
    ),
    "scenario.json without hardware": _case(
        PER_REQUEST,
        _edit_json("scenario.json", lambda d: d.pop("hardware")),
        ["scenario.json", "hardware"],
    ),
    "a damaged holdout run": _case(
        PER_REQUEST, _cut_half("requests.csv"), ["requests.csv"], holdout=True
    ),
    "a stage's latency a list": _case(
        STAGED,
        _edit_json("summary.json", lambda d: d["recorded"]["stages"][1].update(latency=[0.1])),
        ["summary.json", "recorded.stages[1].latency"],
    ),
    "a stage's failed a word": _case(
        STAGED,
        _edit_json("summary.json", lambda d: d["recorded"]["stages"][0].update(failed="x")),
        ["summary.json", "recorded.stages[0].failed"],
    ),
    "a stage's sent negative": _case(
        STAGED,
        _edit_json("summary.json", lambda d: d["recorded"]["stages"][0].update(sent=-4)),
        ["summary.json", "recorded.stages[0].sent"],
    ),
    "a stage's index a list": _case(
        STAGED,
        _edit_json("summary.json", lambda d: d["recorded"]["stages"][0].update(index=[0])),
        ["summary.json", "recorded.stages[0].index"],
    ),
    "recorded.stages a string": _case(
        STAGED,
        _edit_json("summary.json", lambda d: d["recorded"].update(stages="all")),
        ["summary.json", "recorded.stages"],
    ),
    "num_requests negative": _case(
        PER_REQUEST,
        _edit_json("summary.json", lambda d: d.update(num_requests=-1)),
        ["summary.json", "num_requests"],
    ),
    "num_rejected a word": _case(
        PER_REQUEST,
        _edit_json("summary.json", lambda d: d.update(num_rejected="none")),
        ["summary.json", "num_rejected"],
    ),
    "summary.json a list": _case(
        PER_REQUEST,
        lambda r: (r / "summary.json").write_text("[]"),
        ["summary.json", "JSON object"],
    ),
    "scenario.json's hardware without a name": _case(
        PER_REQUEST,
        _edit_json("scenario.json", lambda d: d["hardware"].pop("name")),
        ["scenario.json", "hardware"],
    ),
    "requests.csv without arrival_s": _case(
        PER_REQUEST,
        lambda r: (r / "requests.csv").write_text(
            (r / "requests.csv").read_text().replace("arrival_s", "arrived", 1)
        ),
        ["requests.csv", "arrival_s"],
    ),
    "requests.csv a word for a time": _case(
        PER_REQUEST,
        lambda r: (r / "requests.csv").write_text(
            _word_in_column((r / "requests.csv").read_text(), "finish_s")
        ),
        ["requests.csv:3", "finish_s"],
    ),
    "requests.csv a folder": _case(
        PER_REQUEST,
        lambda r: ((r / "requests.csv").unlink(), (r / "requests.csv").mkdir()),
        ["requests.csv"],
    ),
}


def _word_in_column(text: str, column: str) -> str:
    """``text`` (a CSV) with ``column`` of its second data row replaced by a word."""
    lines = text.splitlines()
    at = lines[0].split(",").index(column)
    cells = lines[2].split(",")
    cells[at] = "soon"
    lines[2] = ",".join(cells)
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    return run_cases(CASES, lambda: tmp_path_factory.mktemp("case"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_damaged_recorded_run_is_one_line(outcomes, name):
    outcome = outcomes[name]
    assert one_line_error(outcome.result, *outcome.culprits) == ""
    assert outcome.after == outcome.before  # nothing written
