"""``pagesim sweep`` on the local pool: expansion, validation up front, determinism
(--jobs 1 and --jobs 2 give the same bytes), resume after an interruption without
repeating work, a failing point recorded in its row, inputs carried with each point,
and the page in Chromium."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sim.cli import main
from sim.sweep.points import csv_text, flatten
from sim.sweep.spec import read_sweep_file, sweep_from_scenario
from sim.sweep.task import make_payload, run_point
from tests.browser import check_page, layout
from tests.sim.run.test_run_folders import default_sigint

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "scenarios" / "tiny.yaml"
SHIPPED = ROOT / "scenarios" / "sweeps" / "batch-and-load.yaml"

#: A scheduler plug-in that raises after ``fail_after`` calls (never when it is -1).
BOOM = """
class Boom:
    def __init__(self, fail_after: int = -1):
        self.fail_after, self.calls = fail_after, 0

    def order(self, waiting, view):
        self.calls += 1
        if 0 <= self.fail_after < self.calls:
            raise RuntimeError("boom on purpose")
        return sorted(waiting, key=lambda e: (e.request.arrival_s, e.request.req_id))
"""


def tiny_base(folder: Path, requests: int = 120, plugin: bool = False) -> Path:
    """tiny.yaml, shorter, in ``folder`` (with the Boom scheduler beside it)."""
    folder.mkdir(parents=True, exist_ok=True)
    text, replaced = re.subn(r"num_requests: \d+", f"num_requests: {requests}", TINY.read_text())
    assert replaced == 1  # (tiny.yaml's length is not what this base runs)
    if plugin:
        (folder / "boom.py").write_text(BOOM)
        text = text.replace("scheduler:\n", "scheduler:\n  policy: boom.py:Boom\n")
    path = folder / "base.yaml"
    path.write_text(text)
    return path


def files_of(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def finished_points(out: Path) -> list[Path]:
    runs = out / "runs"
    if not runs.is_dir():
        return []
    return [p for p in runs.iterdir() if p.is_dir() and not p.name.startswith(".")]


def rows(out: Path) -> list[dict[str, str]]:
    with open(out / "points.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_a_grid_with_a_zip_group_and_seeds_expands_in_order(tmp_path):
    sweep_file = tmp_path / "s.yaml"
    base = tiny_base(tmp_path)
    sweep_file.write_text(
        f"base: {base.name}\ngrid: {{cache.block_size: [8, 16]}}\n"
        "zip: {workload.arrival.rate_rps: [10, 20], simulation.num_requests: [50, 60]}\n"
        "seeds: [3, 5]\n"
    )
    sweep = read_sweep_file(sweep_file)
    got = [
        (v["cache.block_size"], v["workload.arrival.rate_rps"], v["simulation.num_requests"], s)
        for v, s in sweep.assignments()
    ]
    assert got == [
        (8, 10, 50, 3),
        (8, 10, 50, 5),
        (8, 20, 60, 3),
        (8, 20, 60, 5),
        (16, 10, 50, 3),
        (16, 10, 50, 5),
        (16, 20, 60, 3),
        (16, 20, 60, 5),
    ]
    # seeds: N counts up from the base scenario's seed
    assert sweep_from_scenario(base, {"seeds": 3}).seeds() == [0, 1, 2]


def test_flattened_summary_columns_are_stable_and_cells_round_trip():
    summary = {"b": {"p99": 0.1, "list": [1, 2]}, "a": 3, "c": None, "d": True}
    assert flatten(summary) == {"b.p99": 0.1, "a": 3, "c": None, "d": True}
    text = csv_text([{"point": 1, **flatten(summary)}, {"point": 0, "z": 1 / 3}], ["point"])
    assert text.splitlines() == ["point,a,b.p99,c,d,z", "1,3,0.1,,true,", f"0,,,,,{1 / 3!r}"]


def test_jobs_1_and_jobs_2_write_the_same_bytes_and_a_second_run_reuses(tmp_path):
    base = tiny_base(tmp_path)
    args = ["sweep", str(base), "--grid", "cache.block_size=8,16", "--seeds", "2", "--quiet"]
    assert main([*args, "--out", str(tmp_path / "a"), "--jobs", "1"]) == 0
    assert main([*args, "--out", str(tmp_path / "b"), "--jobs", "2"]) == 0
    a, b = files_of(tmp_path / "a"), files_of(tmp_path / "b")
    a.pop("sweep.json"), b.pop("sweep.json")  # it records the date and the command
    assert a == b
    table = rows(tmp_path / "a")
    assert [(r["cache.block_size"], r["seed"], r["status"]) for r in table] == [
        ("8", "0", "ok"),
        ("8", "1", "ok"),
        ("16", "0", "ok"),
        ("16", "1", "ok"),
    ]
    assert all(float(r["throughput_tok_s"]) > 0 for r in table)
    # every run folder is a whole run, metadata naming its hash and no date
    for row in table:
        folder = tmp_path / "a" / row["run"]
        meta = json.loads((folder / "metadata.json").read_text())
        assert meta["scenario_hash"] == folder.name and "date_utc" not in meta
        assert {"requests.csv", "steps.csv", "summary.json", "report.html"} <= set(
            os.listdir(folder)
        )
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "a" / "runs").rglob("*")}
    assert main([*args, "--out", str(tmp_path / "a"), "--jobs", "2"]) == 0
    after = {p: p.stat().st_mtime_ns for p in (tmp_path / "a" / "runs").rglob("*")}
    assert after == before  # nothing run again, nothing rewritten


def test_a_failing_point_records_its_error_and_the_sweep_goes_on(tmp_path, capsys):
    base = tiny_base(tmp_path, plugin=True)
    code = main(
        [
            "sweep",
            str(base),
            "--grid",
            "scheduler.params.fail_after=-1,3",
            "--out",
            str(tmp_path / "out"),
            "--jobs",
            "2",
            "--quiet",
            "--no-report",
        ]
    )
    assert code == 1
    ok, failed = rows(tmp_path / "out")
    assert (ok["status"], ok["error"]) == ("ok", "")
    assert failed["status"] == "failed" and "boom on purpose" in failed["error"]
    assert failed["run"] == "" and failed.get("throughput_tok_s", "") == ""
    assert len(os.listdir(tmp_path / "out" / "runs")) == 1
    assert "(1 ok, 1 failed" in capsys.readouterr().out


def test_inputs_travel_with_the_task_not_the_file_system(tmp_path):
    """A plug-in beside the scenario and a trace one folder up (``..``) are read on the
    driver; the task runs from a payload alone, after the originals are gone."""
    (tmp_path / "traces").mkdir()
    trace = ROOT / "scenarios" / "traces" / "azure-sample.csv"
    (tmp_path / "traces" / "t.csv").write_bytes(trace.read_bytes())
    base = tiny_base(tmp_path / "sc", plugin=True)
    base.write_text(
        base.read_text().replace(
            "arrival: {kind: poisson, rate_rps: 50}",
            "arrival: {kind: trace, format: azure-csv, path: ../traces/t.csv, time_scale: 0.01}",
        )
    )
    from sim.sweep.driver import resolve_points

    (point,) = resolve_points(sweep_from_scenario(base, {}))
    payload = make_payload(point, html=False)
    assert set(payload["files"]) == {"boom.py", "../traces/t.csv"}
    (tmp_path / "traces" / "t.csv").unlink()
    (tmp_path / "sc" / "boom.py").unlink()
    result = run_point(payload)
    assert result["error"] is None, result["error"]
    scenario = json.loads(result["files"]["scenario.json"])
    assert scenario["workload"]["arrival"]["path"] == "../traces/t.csv"  # as written
    assert result["summary"]["num_requests"] == 120


def test_an_interrupted_sweep_resumes_without_losing_or_repeating_a_point(tmp_path):
    base = tiny_base(tmp_path, requests=400)
    out = tmp_path / "out"
    args = [
        sys.executable,
        "-m",
        "sim.cli",
        "sweep",
        str(base),
        "--grid",
        "cache.block_size=4,8,16,32",
        "--jobs",
        "1",
        "--out",
        str(out),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [*args, "--quiet"],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )  # (see test_run_folders)
    # Wait for a *finished* point: an unfinished one lives in a dot-folder that the
    # interrupt removes, so signalling while only that exists would leave nothing done.
    deadline = time.time() + 60
    while time.time() < deadline and not finished_points(out):
        time.sleep(0.05)
    assert finished_points(out), "no point finished within 60 s"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    done = {p.name: files_of(p) for p in (out / "runs").iterdir() if p.is_dir()}
    assert 1 <= len(done) < 4
    assert not [p for p in (out / "runs").iterdir() if p.name.startswith(".")]  # no partial
    assert len(rows(out)) == len(done)  # the table holds exactly the finished points
    again = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert f"already done {len(done)}" in again.stderr
    for name, files in done.items():
        assert files_of(out / "runs" / name) == files
    assert [r["status"] for r in rows(out)] == ["ok"] * 4
    fresh = tmp_path / "fresh"
    assert (
        main(
            [
                "sweep",
                str(base),
                "--grid",
                "cache.block_size=4,8,16,32",
                "--jobs",
                "2",
                "--out",
                str(fresh),
                "--quiet",
            ]
        )
        == 0
    )
    assert (fresh / "points.csv").read_bytes() == (out / "points.csv").read_bytes()


def test_the_shipped_sweep_file_validates_and_its_page_draws(chromium, tmp_path):
    sweep = read_sweep_file(SHIPPED)
    assert len(sweep.assignments()) == 12
    base = tiny_base(tmp_path)
    out = tmp_path / "out"
    assert (
        main(
            [
                "sweep",
                str(base),
                "--grid",
                "workload.arrival.rate_rps=50,400,1600",
                "--grid",
                "scheduler.max_num_seqs=4,16",
                "--seeds",
                "2",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    result = check_page(chromium, out / "sweep.html")
    assert result["errors"] == [] and result["plotly"]
    plots = {p["id"]: p for p in result["plots"]}
    assert set(plots) == {"axis-0", "axis-1", "pareto"}
    assert all(p["drawn"] and p["with_points"] == p["traces"] > 0 for p in plots.values())
    # 7 metrics x 2 lines (the other axis's values), each with a point per axis value
    assert plots["axis-0"]["points"] == 7 * 2 * 3
    assert plots["pareto"]["traces"] == 2
    html = (out / "sweep.html").read_text()
    assert '"mode":"lines+markers+text"' in html.replace(" ", "")  # the front is labelled
    assert layout(chromium, out / "sweep.html")["cut_labels"] == []  # and no label is cut
    # each configuration's verdict, from its seeds' (one word where they agree)
    assert "<th>verdict</th>" in html
    assert re.search(r"<td>(stable|overloaded|too short)( \d)?(, [a-z ]+ \d)*</td>", html)
    run = rows(out)[0]["run"]
    assert check_page(chromium, out / run / "report.html")["errors"] == []


@pytest.mark.parametrize("jobs", ["0", "-1", "x"])
def test_jobs_must_be_a_positive_integer(jobs, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["sweep", str(TINY), "--out", str(tmp_path / "o"), "--jobs", jobs])
    assert exit_.value.code == 2
    assert "--jobs" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_model_config_and_a_calibration_travel_with_the_task(tmp_path):
    """``model: {config: ...}`` and ``calibration:`` name files as a trace does: the README's
    ``--set 'model={config: models/...json}'`` sweep ran every point on the config."""
    folder = tmp_path / "sc"
    base = tiny_base(folder)
    (folder / "models").mkdir()
    shipped = ROOT / "scenarios" / "models" / "tiny.json"
    (folder / "models" / "tiny.json").write_bytes(shipped.read_bytes())
    (folder / "cal.yaml").write_text("hardware: {sustained_bandwidth_fraction: 0.5}\n")
    from sim.sweep.driver import resolve_points

    sweep = sweep_from_scenario(base, {"set": {"model": {"config": "models/tiny.json"}}})
    with_cal = sweep_from_scenario(base, {"set": {"calibration": "cal.yaml"}})
    for spec, name in ((sweep, "models/tiny.json"), (with_cal, "cal.yaml")):
        (point,) = resolve_points(spec)
        payload = make_payload(point, html=False)
        assert name in payload["files"]
        result = run_point(payload)
        assert result["error"] is None, result["error"]


def test_the_printed_table_gives_each_failed_point_its_reason(tmp_path, capsys):
    base = tiny_base(tmp_path, plugin=True)
    args = ["sweep", str(base), "--grid", "scheduler.params.fail_after=-1,3"]
    code = main([*args, "--out", str(tmp_path / "out"), "--jobs", "1", "--no-report"])
    assert code == 1
    out = capsys.readouterr().out
    assert "point 1 failed: " in out and "boom on purpose" in out
    assert "point 0 failed" not in out


def test_printed_numbers_are_grouped_never_in_exponent_form():
    from sim.sweep.tables import number

    assert [number(t) for t in ("11580.3", "9020.4", "27.19", "0.2119")] == [
        "11,580",
        "9,020",
        "27.19",
        "0.2119",
    ]


@pytest.mark.parametrize(
    "harm",
    ["delete requests.csv", "truncate steps.csv", "a file for a run folder", "a file for runs/"],
)
def test_a_resumed_sweep_runs_a_damaged_point_again_and_says_so(tmp_path, capsys, harm):
    """Each finished point's folder lists its files with their sizes and sha256
    (manifest.json); a resume checks it and runs a damaged point again."""
    base = tiny_base(tmp_path, requests=60)
    out = tmp_path / "out"
    args = [
        "sweep",
        str(base),
        "--grid",
        "scheduler.max_num_seqs=4,8",
        "--out",
        str(out),
        "--jobs",
        "1",
        "--no-report",
        "--quiet",
    ]
    assert main(args) == 0
    before = files_of(out / "runs")
    folder = finished_points(out)[0]
    if harm == "delete requests.csv":
        (folder / "requests.csv").unlink()
    elif harm == "truncate steps.csv":
        data = (folder / "steps.csv").read_bytes()
        (folder / "steps.csv").write_bytes(data[: len(data) // 2])
    elif harm == "a file for a run folder":
        shutil.rmtree(folder)
        folder.write_text("not a run")
    else:
        shutil.rmtree(out / "runs")
        (out / "runs").write_text("not a folder")
    capsys.readouterr()
    assert main(args) == 0
    assert "running again" in capsys.readouterr().err
    assert files_of(out / "runs") == before  # the same bytes as the first time
    assert {row["status"] for row in rows(out)} == {"ok"}


def test_a_rewritten_file_that_is_a_folder_is_one_line(tmp_path, capsys):
    base = tiny_base(tmp_path, requests=60)
    out = tmp_path / "out"
    args = ["sweep", str(base), "--out", str(out), "--no-report", "--quiet"]
    assert main(args) == 0
    (out / "points.csv").unlink()
    (out / "points.csv").mkdir()
    assert main(args) == 2
    assert "points.csv: is not a file" in capsys.readouterr().err


def test_an_out_holding_another_sweep_is_replaced_only_with_force(tmp_path, capsys):
    base = tiny_base(tmp_path, requests=60)
    out = tmp_path / "out"
    args = ["sweep", str(base), "--out", str(out), "--no-report", "--quiet", "--jobs", "1"]
    assert main([*args, "--grid", "scheduler.max_num_seqs=4,8"]) == 0
    first = (out / "points.csv").read_bytes()
    assert main([*args, "--grid", "scheduler.max_num_seqs=4,16"]) == 2
    assert "holds a sweep of other settings" in capsys.readouterr().err
    assert (out / "points.csv").read_bytes() == first
    assert main([*args, "--grid", "scheduler.max_num_seqs=4,16", "--force"]) == 0
    assert sorted(row["scheduler.max_num_seqs"] for row in rows(out)) == ["16", "4"]
    assert len(list((out / "runs").iterdir())) == 2  # the 8 point's run went with the rest


def test_a_configurations_verdict_says_where_its_seeds_disagree():
    from sim.sweep.page import verdicts

    stable = {"steady_state.verdict": "stable"}
    overloaded = {"steady_state.verdict": "overloaded"}
    assert verdicts([stable, stable]) == "stable"
    assert verdicts([stable, overloaded, overloaded]) == "overloaded 2, stable 1"


def test_the_sweep_page_says_which_settings_could_not_matter(tmp_path):
    """Varying the eviction policy where nothing is ever evicted varies nothing: the
    page says so for each configuration, as `pagesim run` and points.csv do."""
    base = tiny_base(tmp_path, requests=60)
    out = tmp_path / "out"
    args = ["sweep", str(base), "--grid", "eviction.policy=lru,lfu", "--out", str(out)]
    assert main([*args, "--quiet", "--no-report", "--jobs", "1"]) == 0
    page = (out / "sweep.html").read_text()
    assert "<h2>Warnings</h2>" in page
    for policy in ("lru", "lfu"):  # (tiny.yaml keeps no prefix: no block is kept for reuse)
        assert f"eviction.policy={policy}: eviction.policy {policy} cannot matter" in page
