"""Progress on stderr: lines with an ETA when stderr is not a terminal, nothing with
--quiet."""

from __future__ import annotations

import time

import sim.run.progress
from sim.cli import main
from sim.run.progress import Progress
from tests.sim.run.test_run_folders import TINY


def test_off_a_terminal_progress_is_whole_lines_with_an_eta(capsys, monkeypatch):
    monkeypatch.setattr(sim.run.progress, "LOG_INTERVAL_S", 0.0)
    bar = Progress(4, "simulating")
    for done in range(1, 5):
        time.sleep(0.01)
        bar.update(done)
    bar.close()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 3 and all(line.startswith("simulating:") for line in lines)
    assert "\r" not in "".join(lines)
    assert "<" in lines[-2] and lines[-1].startswith("simulating: 100%")  # elapsed<ETA


def test_quiet_runs_print_no_progress(tmp_path, capsys):
    assert main(["run", str(TINY), "--out", str(tmp_path / "r"), "--quiet", "--no-report"]) == 0
    assert capsys.readouterr().err == ""
    assert main(["run", str(TINY), "--out", str(tmp_path / "s"), "--no-report"]) == 0
    err = capsys.readouterr().err
    assert "simulating:" in err and "writing:" in err
