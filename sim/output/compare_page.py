"""``pagesim compare --html FILE``: one page with the runs side by side: the metrics and
the scenario fields that differ (sim.output.compare), the runs' TTFT, TPOT and E2E CDFs
overlaid, and their throughput, KV use and queue length over time overlaid (all
replicas of a run together). plotly.js is written once beside the page
(sim.output.page)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import plotly.colors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sim.output.compare import MISSING, differing_fields, field_text
from sim.output.page import (
    LATENCY_COLUMNS,
    TEMPLATE,
    cdf_ms,
    downsample_indices,
    figure_div,
    finish_cdf_panel,
    html_table,
    latency_cdf_grid,
    mark_empty,
    page,
    plotly_script_src,
)
from sim.output.series import binned_rate, cluster_series, time_bins
from sim.output.steplog import _STEP_INDEX, STEP_COLUMNS
from sim.output.tables import compare_rows

__all__ = ["COMPARE_FIGURES", "RunSeries", "write_compare_page"]

#: Title of each figure, by its div id.
COMPARE_FIGURES = {
    "cdf": "Latency distributions (CDF), runs overlaid",
    "timeseries": "Over time, runs overlaid (all replicas of a run together)",
}

_COLORS = plotly.colors.qualitative.Plotly + plotly.colors.qualitative.Dark24


@dataclass
class RunSeries:
    """One run as the page reads it: its label, summary.json, requests.csv columns
    (arrival_s, finish_s, ttft_s, tpot_s, e2e_s, output_tokens at least) and steps.csv
    rows (sim.output.steplog.STEP_COLUMNS order)."""

    label: str
    summary: Mapping[str, Any]
    requests: Mapping[str, np.ndarray]
    steps: np.ndarray


def write_compare_page(
    path: str | Path,
    runs: Sequence[RunSeries],
    scenarios: Mapping[str, Mapping[str, Any] | None] | None = None,
    *,
    belady: Mapping[str, float | None] | None = None,
    plotly_js: str | None = None,
) -> Path:
    """Write the page to ``path`` (its folder created if missing) and plotly.js beside
    it (or where ``plotly_js`` says); return ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    labels = [run.label for run in runs]
    summaries = {run.label: run.summary for run in runs}
    metrics = [[label, *texts] for label, _, texts in compare_rows(summaries, belady)]
    parts = [html_table(["metric", *labels], metrics, css_class="compare")]
    fields = differing_fields(scenarios or {})
    if fields:
        rows = [
            [key, *(field_text(values.get(label, MISSING)) for label in labels)]
            for key, values in fields.items()
        ]
        parts.append("<h2>Scenario fields that differ</h2>")
        parts.append(html_table(["field", *labels], rows, css_class="fields"))
    parts.append(figure_div(cdf_figure(runs), "cdf"))
    parts.append(figure_div(timeseries_figure(runs), "timeseries"))
    body = "\n".join(parts)
    title = "pagesim compare: " + ", ".join(labels)
    path.write_text(page(title, body, plotly_script_src(path, plotly_js)), encoding="utf-8")
    return path


def _color(i: int) -> str:
    return _COLORS[i % len(_COLORS)]


def cdf_figure(runs: Sequence[RunSeries]) -> go.Figure:
    fig = latency_cdf_grid()
    for col, (label, key) in enumerate(LATENCY_COLUMNS, start=1):
        drawn = False
        for i, run in enumerate(runs):
            values, cdf = cdf_ms(run.requests[key])
            if not values.size:
                continue
            keep = downsample_indices(values.size, 2000)
            fig.add_trace(
                go.Scatter(
                    x=values[keep].astype(np.float32),
                    y=cdf[keep].astype(np.float32),
                    mode="lines",
                    name=run.label,
                    legendgroup=run.label,
                    showlegend=col == 1,
                    line={"color": _color(i)},
                ),
                row=1,
                col=col,
            )
            drawn = True
        finish_cdf_panel(fig, col, drawn, f"none: no run has a {label}", top=1.05)
    fig.update_yaxes(title_text="fraction of requests", row=1, col=1)
    fig.update_layout(title=COMPARE_FIGURES["cdf"], template=TEMPLATE, height=480)
    return fig


def _span(run: RunSeries) -> tuple[float, float]:
    times = [run.requests["arrival_s"], run.requests["finish_s"]]
    if run.steps.shape[0]:
        times.append(run.steps[:, _STEP_INDEX["time_s"]])
    known = np.concatenate(times)
    known = known[~np.isnan(known)]
    return (0.0, float(known.max())) if known.size else (0.0, 1.0)


def timeseries_figure(runs: Sequence[RunSeries]) -> go.Figure:
    titles = [
        "completed requests/s (time bins)",
        "KV pool in use (% of all replicas' slots)",
        "requests waiting (all replicas)",
        "requests running (all replicas)",
    ]
    fig = make_subplots(
        rows=4, cols=1, shared_xaxes=True, vertical_spacing=0.06, subplot_titles=titles
    )
    end = max((_span(run)[1] for run in runs), default=1.0)
    edges = time_bins(0.0, end)
    centers = (edges[:-1] + edges[1:]) / 2
    grid = np.linspace(0.0, end, 2000)
    for i, run in enumerate(runs):
        style = {"name": run.label, "legendgroup": run.label, "line": {"color": _color(i)}}
        done = ~np.isnan(run.requests["e2e_s"])
        finish = np.where(done, run.requests["finish_s"], np.nan)
        fig.add_trace(
            go.Scatter(
                x=centers.astype(np.float32),
                y=binned_rate(finish, edges).astype(np.float32),
                mode="lines",
                line_shape="hvh",
                **style,
            ),
            row=1,
            col=1,
        )
        _recorded_series(fig, run, style)
        if not run.steps.shape[0]:
            continue
        slots = run.summary.get("total_slots") or 0
        steps = dict(zip(STEP_COLUMNS, run.steps.T))  # the series read columns by name
        free, per_replica = cluster_series(steps, "free_slots", grid, initial=slots)
        replicas = max(run.summary.get("num_replicas", 1), len(per_replica))
        total = slots * replicas
        # A replica before its first step is all free, and so is one that never stepped.
        free = free + slots * (replicas - len(per_replica))
        used = 100.0 * (1.0 - free / total) if total else None
        queue, _ = cluster_series(steps, "queue_len", grid)
        running, _ = cluster_series(steps, "batch_size", grid)
        for row, values in ((2, used), (3, queue), (4, running)):
            if values is None:
                continue
            fig.add_trace(
                go.Scatter(
                    x=grid.astype(np.float32),
                    y=np.asarray(values, dtype=np.float32),
                    mode="lines",
                    showlegend=False,
                    **style,
                ),
                row=row,
                col=1,
            )
    seen = any(run.steps.shape[0] or _series_of(run) for run in runs)
    if not any(run.steps.shape[0] for run in runs):
        mark_empty(fig, "none: no run has steps (a recording has no KV figures)", row=2, col=1)
    if not seen:
        for row in (3, 4):
            mark_empty(fig, "none: no run has steps or a recorded time series", row=row, col=1)
    fig.update_yaxes(title_text="req/s", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="%", rangemode="tozero", row=2, col=1)
    fig.update_yaxes(title_text="requests", rangemode="tozero", row=3, col=1)
    fig.update_yaxes(title_text="requests", rangemode="tozero", row=4, col=1)
    fig.update_xaxes(
        title_text="seconds from the run's start (a simulation's clock, or the recording's)",
        row=4,
        col=1,
    )
    fig.update_layout(
        title=COMPARE_FIGURES["timeseries"],
        template=TEMPLATE,
        height=1080,
    )
    return fig


def _series_of(run: RunSeries) -> Mapping[str, Any] | None:
    """A recorded run's own time series (``t``, ``waiting``, ``running``), if it has one."""
    series = (run.summary.get("recorded") or {}).get("series")
    return series if isinstance(series, Mapping) and series.get("t") else None


def _recorded_series(fig: go.Figure, run: RunSeries, style: dict) -> None:
    """The engine's own waiting and running counts of a recording, dashed, on rows 3-4."""
    series = _series_of(run)
    if series is None:
        return
    t = np.asarray(series["t"], dtype=np.float32)
    for row, key in ((3, "waiting"), (4, "running")):
        values = series.get(key)
        if not values or len(values) != t.shape[0]:
            continue
        fig.add_trace(
            go.Scatter(
                x=t,
                y=np.asarray(values, dtype=np.float32),
                mode="lines",
                showlegend=False,
                name=f"{run.label} (recorded)",
                legendgroup=run.label,
                line={**style["line"], "dash": "dash"},
            ),
            row=row,
            col=1,
        )
