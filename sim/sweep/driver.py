"""``pagesim sweep``, end to end: every point validated before anything runs, then run
(resuming: points already in the folder are not run again), with points.csv kept
current as results arrive, sweep.json and the HTML page.

The output folder::

    sweep.json      the resolved sweep, its points, versions, date, command, executor
    points.csv      one row per point: point, seed, status, error, run, the axes, and
                    every scalar of the run's summary.json (dotted names, sorted)
    sweep.html      each metric against each axis (seeds: mean and spread), Pareto view
    plotly.min.js   shared by sweep.html and every run's report.html
    runs/<hash>/    each point's run folder, as ``pagesim run`` writes it
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sim.sweep.points import LEAD, Point, csv_text, point_row, resolve_point
from sim.sweep.spec import Sweep, override
from sim.sweep.store import Outcomes, provenance, run_points, write_json, write_text

POINTS_CSV = "points.csv"
SWEEP_JSON = "sweep.json"
SWEEP_HTML = "sweep.html"


@dataclass
class SweepDone:
    """What a sweep ended with."""

    points: int
    ok: int
    failed: int
    runs: int  # distinct run folders
    cpu_s: float  # CPU seconds of the points run now (in their workers)


def resolve_points(sweep: Sweep) -> list[Point]:
    """Every point, validated (a bad point fails the whole sweep here, before anything
    runs or is written). Raises ScenarioError naming the point."""
    common = [override(k, v) for k, v in sweep.spec.set.items()]
    return [
        resolve_point(i, sweep.base_raw, sweep.base, values, seed, common, where=sweep.source)
        for i, (values, seed) in enumerate(sweep.assignments())
    ]


def run_sweep(
    sweep: Sweep,
    points: Sequence[Point],
    out: Path,
    executor,
    *,
    html: bool = True,
    progress: bool = True,
    argv: Sequence[str] | None = None,
) -> SweepDone:
    """Run the sweep into ``out`` (checked by sim.sweep.store.check_out) with
    ``executor`` (entered by the caller)."""
    out.mkdir(parents=True, exist_ok=True)
    axes = sweep.spec.axes()
    write_json(
        out / SWEEP_JSON,
        {
            "sweep": sweep.resolved(),
            "axes": axes,
            "points": [
                {"point": p.index, "values": p.values, "seed": p.seed, "run": p.folder}
                for p in points
            ],
            **provenance(argv, executor),
        },
    )
    from sim.output.page import plotly_script_src

    plotly_script_src(out / SWEEP_HTML)  # sweep.html's, and every run report's

    def table(outcomes: Outcomes) -> None:
        write_text(out / POINTS_CSV, points_csv(points, axes, outcomes))

    cpu_s = [0.0]
    outcomes = run_points(
        points, out, executor, html=html, progress=progress, on_result=table, cpu_s=cpu_s
    )
    table(outcomes)
    from sim.sweep.page import write_sweep_page

    write_sweep_page(out / SWEEP_HTML, sweep, points, outcomes)  # (``html``: run reports)
    failed = sum(1 for p in points if outcomes[p.key][1] is not None)
    runs = len({p.key for p in points})
    return SweepDone(len(points), len(points) - failed, failed, runs, cpu_s[0])


def points_csv(points: Sequence[Point], axes: Sequence[str], outcomes: Outcomes) -> str:
    """points.csv for the points that have an outcome, in point order."""
    rows = [point_row(p, axes, *outcomes[p.key]) for p in points if p.key in outcomes]
    return csv_text(rows, [*LEAD[:2], *axes, *LEAD[2:]])
