"""Hostile input to ``pagesim sweep`` and ``pagesim capacity``, through the real command:
each case is one line on stderr naming the culprit, exit code 2, no traceback, and
nothing written (README, "Bad input"; tests/adversarial/cli.py)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.adversarial.cli import ROOT, one_line_error, run_all, run_cli, snapshot

TINY = ROOT / "scenarios" / "tiny.yaml"
TRACE = ROOT / "scenarios" / "trace-azure.yaml"


def sweep_file(tmp: Path, name: str, body: str) -> str:
    path = tmp / name
    path.write_text(f"base: {TINY}\n{body}")
    return str(path)


def test_bad_sweeps_and_capacity_searches_are_one_line_and_write_nothing(tmp_path):
    out = str(tmp_path / "out")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    cases = [
        (
            [sweep_file(tmp_path, "a.yaml", "gird: {cache.block_size: [8]}\n"), "--out", out],
            ["a.yaml", "gird"],
        ),
        (
            [sweep_file(tmp_path, "b.yaml", "grid: {cache.blok_size: [8]}\n"), "--out", out],
            ["b.yaml", "cache.blok_size", "block_size"],
        ),
        (
            [sweep_file(tmp_path, "c.yaml", "grid: {cache.block_size: [8, 0]}\n"), "--out", out],
            ["c.yaml", "point 1", "cache.block_size"],
        ),
        (
            [
                sweep_file(tmp_path, "d.yaml", "zip: {cache.block_size: [8], seedz: [1, 2]}\n"),
                "--out",
                out,
            ],
            ["d.yaml", "zip"],
        ),
        ([sweep_file(tmp_path, "e.yaml", "seeds: 0\n"), "--out", out], ["e.yaml", "seeds"]),
        (
            [sweep_file(tmp_path, "f.yaml", "grid: {simulation.seed: [1, 2]}\n"), "--out", out],
            ["f.yaml", "simulation.seed", "seeds"],
        ),
        ([str(tmp_path / "g.yaml"), "--out", out], ["g.yaml"]),  # no such file
        (["--grid", "cache.block_size", str(TINY), "--out", out], ["--grid"]),
        (
            [str(TINY), "--grid", "eviction.policy=lru,lfx", "--out", out],
            ["point 1", "eviction.policy", "lfx"],
        ),
        ([str(TINY), "--set", "cache.block_size=-3", "--out", out], ["cache.block_size"]),
        ([str(TINY), "--out", str(TINY)], ["--out", "tiny.yaml"]),
        ([str(TINY), "--out", str(busy)], ["--out", "sweep.json"]),
        ([str(TINY), "--out", out, "--ray", "127.0.0.1:1"], ["--ray", "127.0.0.1:1"]),
        ([str(TINY), "--out", out, "--ray", "not an address"], ["--ray", "HOST:PORT"]),
        # counts that would be built before they were checked (MemoryError, OverflowError)
        (
            [sweep_file(tmp_path, "h.yaml", "seeds: 1000000000\n"), "--out", out],
            ["h.yaml", "seeds", "100,000"],
        ),
        ([str(TINY), "--seeds", str(10**12), "--out", out], ["--seeds", "100,000"]),
        ([str(TINY), "--jobs", str(10**10), "--out", out], ["--jobs", "1024"]),
    ]
    capacity = [
        ([str(TINY), "--slo", "ttft=2", "--out", out], ["--slo", "METRIC=LIMIT"]),
        ([str(TINY), "--slo", "goodput=150%", "--out", out], ["--slo", "goodput"]),
        ([str(TRACE), "--out", out], ["trace-azure.yaml", "workload.arrival", "rate_rps"]),
        ([str(TINY), "--vary", "cache.blok_size=8,16", "--out", out], ["cache.blok_size"]),
        ([str(TINY), "--price", "h100-sxm=free", "--out", out], ["--price"]),
        ([str(TINY), "--tolerance", "2", "--out", out], ["--tolerance"]),
        ([str(TINY), "--jobs", "0", "--out", out], ["--jobs"]),
        ([str(TINY), "--jobs", str(10**10), "--out", out], ["--jobs", "1024"]),
    ]
    before = snapshot(tmp_path)
    commands = [["sweep", *args] for args, _ in cases]
    commands += [["capacity", *args] for args, _ in capacity]
    results = run_all(commands)
    problems = [
        one_line_error(result, *culprits)
        for result, (_, culprits) in zip(results, cases + capacity)
    ]
    assert [p for p in problems if p] == []
    assert snapshot(tmp_path) == before


def test_a_missing_ray_is_one_line_naming_the_extra(tmp_path):
    """ray made unimportable (a package that raises ImportError shadows it)."""
    shadow = tmp_path / "shadow" / "ray"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "shadow")}
    before = snapshot(tmp_path)
    result = run_cli(["sweep", str(TINY), "--out", str(tmp_path / "out"), "--ray"], env=env)
    assert one_line_error(result, "--ray", "ray", ".[cluster]") == ""
    assert snapshot(tmp_path) == before
