"""Run folders that never lie: all files or none, no silent overwrite, a default folder
per scenario, metadata, and one line for SIGINT, SIGTERM and a closed pipe."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sim.cli import main
from sim.config.loader import load_scenario
from sim.run.folders import FolderExists, atomic_folder, default_run_dir

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "scenarios" / "tiny.yaml"
PAGESIM = [sys.executable, "-m", "sim.cli"]


def test_an_interrupted_write_leaves_the_previous_run_untouched(tmp_path):
    target = tmp_path / "run"
    with atomic_folder(target, force=False) as partial:
        (partial / "summary.json").write_text("old")
    with pytest.raises(KeyboardInterrupt), atomic_folder(target, force=True) as partial:
        (partial / "requests.csv").write_text("header only\n")
        raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no partial folder left
    assert sorted(p.name for p in target.iterdir()) == ["summary.json"]
    assert (target / "summary.json").read_text() == "old"


def test_a_run_folder_is_replaced_only_with_force(tmp_path, capsys):
    out = str(tmp_path / "r")
    assert main(["run", str(TINY), "--out", out, "--quiet", "--no-report"]) == 0
    first = (tmp_path / "r" / "summary.json").read_bytes()
    assert main(["run", str(TINY), "--out", out, "--quiet", "--seed", "5"]) == 2
    err = capsys.readouterr().err
    assert "already holds a run; pass --force" in err and len(err.splitlines()) == 1
    assert (tmp_path / "r" / "summary.json").read_bytes() == first
    assert main(["run", str(TINY), "--out", out, "--quiet", "--seed", "5", "--force"]) == 0
    assert (tmp_path / "r" / "summary.json").read_bytes() != first
    assert (tmp_path / "r" / "report.html").is_file()
    with pytest.raises(FolderExists):
        atomic_folder(tmp_path / "r", force=False).__enter__()


def test_without_out_each_scenario_gets_its_own_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(TINY), "--quiet", "--no-report"]) == 0
    assert main(["run", str(TINY), "--quiet", "--no-report", "--seed", "3"]) == 0
    printed = [line.split()[-1] for line in capsys.readouterr().out.splitlines()]
    expected = [default_run_dir(load_scenario(TINY, seed=s)) for s in (0, 3)]
    assert printed == [f"{p}/summary.json" for p in expected]
    assert expected[0] != expected[1] and {p.parent for p in expected} == {Path("runs")}
    assert expected[1].name.startswith("tiny-seed3-")


def test_metadata_records_what_made_the_run(tmp_path):
    assert main(["run", str(TINY), "--out", str(tmp_path / "r"), "--quiet", "--no-report"]) == 0
    meta = json.loads((tmp_path / "r" / "metadata.json").read_text())
    assert meta["seed"] == 0 and meta["scenario_name"] == "tiny"
    assert meta["pagesim_version"] and meta["packages"]["numpy"] and meta["date_utc"]
    assert len(meta["scenario_hash"]) == 10
    assert meta["command"] == [
        "pagesim",
        "run",
        str(TINY),
        "--out",
        str(tmp_path / "r"),
        "--quiet",
        "--no-report",
    ]


@pytest.mark.parametrize(
    ("sig", "code", "word"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
)
def test_a_signal_mid_run_ends_in_one_line_and_keeps_the_previous_run(tmp_path, sig, code, word):
    out = tmp_path / "r"
    out.mkdir()
    (out / "summary.json").write_text("previous")
    long_run = [
        *PAGESIM,
        "run",
        str(ROOT / "scenarios" / "default.yaml"),
        "--out",
        str(out),
        "--force",
        "--quiet",
        "--set",
        "simulation.num_requests=60000",  # about 10 s here
    ]
    # A shell without job control starts background jobs with SIGINT ignored, and that
    # is inherited: give the run the default disposition, as a terminal would.
    proc = subprocess.Popen(
        long_run, cwd=ROOT, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint
    )
    time.sleep(4.0)  # past loading, well inside the simulation
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert err.strip().splitlines() == [f"pagesim: {word}; no partial results were written"]
    assert [p.name for p in tmp_path.iterdir()] == ["r"]
    assert (out / "summary.json").read_text() == "previous"


def default_sigint() -> None:
    """In the child before exec: SIGINT as a terminal delivers it (not ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_closed_pipe_ends_quietly(tmp_path):
    run = tmp_path / "r"
    assert main(["run", str(TINY), "--out", str(run), "--quiet", "--no-report"]) == 0
    shell = f"{' '.join(PAGESIM)} compare {run} {run} | head -1"
    done = subprocess.run(
        shell,
        shell=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout.startswith("metric")


@pytest.mark.parametrize("command", [["validate", str(TINY)], ["profile", "--model", "tiny"]])
def test_commands_that_need_torch_name_the_extra(command, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # as on a simulator-only install
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "needs torch, which is not installed: pip install -e '.[real]'" in err
    assert len(err.splitlines()) == 1


def test_validate_never_replaces_an_earlier_result_unasked(tmp_path, capsys):
    # One rule with `pagesim run`: a folder that holds files is refused without --force.
    out = tmp_path / "validation"
    out.mkdir()
    (out / "validation.json").write_text("{}")
    code = main(["validate", str(TINY), "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--out" in err[0] and "--force" in err[0]
    assert (out / "validation.json").read_text() == "{}"
