"""The figures of a run's report (sim.output.report), each a function of a RunData
(the request table, the step log's columns and the summary): latency, throughput, arrival
and preemptions here, the memory figures in sim.output.report_memory.

Conventions: times are simulated seconds; the warm-up (first arrival to the start of the
steady window) is shaded; a series that is empty, or zero throughout, is replaced by a
"none: ..." note; per-replica step series get one small panel per replica; plotted
arrays are float32 and thinned (sim.output.page) so a long run stays a small page.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sim.output.page import (
    LATENCY_COLUMNS,
    MAX_POINTS,
    TEMPLATE,
    cdf_ms,
    downsample_indices,
    finish_cdf_panel,
    latency_cdf_grid,
    mark_empty,
    shade_warmup,
)
from sim.output.series import binned_rate, replica_indices, time_bins

#: Title of each figure on the page, by its div id, in page order.
FIGURE_TITLES = {
    "latency": "Latency distributions (CDF; markers at p50, p90, p99)",
    "throughput": "Throughput over time (completions, in time bins)",
    "arrival": "TTFT and queueing delay against arrival time",
    "kv": "KV pool split over time",
    "cache": "Prefix cache: hit rate and cached blocks over time",
    "swap": "Swap: traffic and CPU pool use over time",
    "load": "Batch size and queue length over time",
    "preemptions": "Preemptions over time (cumulative)",
}

TIME_AXIS = "simulated time (s)"
#: The time axis of a run a client observed (``pagesim observe``, an imported recording).
OBSERVED_TIME_AXIS = "time since the run began, as recorded (s)"


class RunData:
    """What the figures read: the request table, the step log's columns (by name; see
    sim.output.series), the summary and the CPU pool (blocks per replica, None when
    unknown). ``replicas`` holds each replica's step indices, in time order."""

    def __init__(self, table, steps, summary, cpu_blocks=None) -> None:
        self.table, self.steps, self.summary = table, steps, summary
        self.cpu_blocks = cpu_blocks
        # A client's recording: times are its clock's, and the engine's side is unseen.
        self.observed = summary.get("observed") is not None
        self.time_axis = OBSERVED_TIME_AXIS if self.observed else TIME_AXIS
        self.num_steps = int(steps["time_s"].shape[0])
        self.replicas = replica_indices(steps)
        window = summary.get("steady_state") or {}
        arrivals = table["arrival_s"]
        self.start_s = float(arrivals.min()) if arrivals.size else 0.0
        self.window = (window.get("window_start_s"), window.get("window_end_s"))
        ends = [self.start_s]
        if self.num_steps:
            step_ends = steps["time_s"] + steps["duration_s"]
            ends.append(float(step_ends.max()))
        finishes = table["finish_s"][~np.isnan(table["finish_s"])]
        if finishes.size:
            ends.append(float(finishes.max()))
        self.end_s = max(ends)

    def shade(self, fig: go.Figure, **where) -> None:
        shade_warmup(fig, self.start_s, self.window[0], **where)

    def column(self, mine: np.ndarray, name: str) -> np.ndarray:
        """Column ``name`` of the steps at indices ``mine`` (a value of ``replicas``)."""
        return self.steps[name][mine]

    def per_trace(self) -> int:
        """Points per trace when each replica has its own."""
        return max(MAX_POINTS // max(len(self.replicas), 1), 1000)


def f32(values) -> np.ndarray:
    """Plotted arrays as float32: half the bytes in the page."""
    return np.asarray(values, dtype=np.float32)


def layout(fig: go.Figure, name: str, height: int = 420, **kwargs) -> go.Figure:
    """The figure's title (FIGURE_TITLES), template and height."""
    fig.update_layout(title=FIGURE_TITLES[name], template=TEMPLATE, height=height, **kwargs)
    return fig


def empty_figure(name: str, text: str) -> go.Figure:
    """The short figure ``name`` shows when it has nothing to plot: ``text`` says why."""
    fig = go.Figure()
    mark_empty(fig, text)
    return layout(fig, name, height=200, showlegend=False)


def latency_figure(data: RunData) -> go.Figure:
    fig = latency_cdf_grid()
    for col, (label, key) in enumerate(LATENCY_COLUMNS, start=1):
        values, cdf = cdf_ms(data.table[key])
        empty = f"none: no request has a {label}"
        if not values.size:
            finish_cdf_panel(fig, col, False, empty, top=1.05)
            continue
        keep = downsample_indices(values.size)
        fig.add_trace(
            go.Scatter(x=f32(values[keep]), y=f32(cdf[keep]), mode="lines", name=label),
            row=1,
            col=col,
        )
        marks = np.percentile(values, [50, 90, 99])
        fig.add_trace(
            go.Scatter(
                x=marks,
                y=[0.5, 0.9, 0.99],
                mode="markers+text",
                text=["p50", "p90", "p99"],
                textposition="middle right",
                hovertext=[f"p{p} {v:,.1f} ms" for p, v in zip((50, 90, 99), marks)],
                hoverinfo="text",
                marker={"color": "black", "size": 7},
                name=f"{label} percentiles",
            ),
            row=1,
            col=col,
        )
        finish_cdf_panel(fig, col, True, empty, top=1.05)
    fig.update_yaxes(title_text="fraction of requests", row=1, col=1)
    if not data.table["req_id"].size:
        mark_empty(fig, "no data")
    return layout(fig, "latency", showlegend=False)


def throughput_figure(data: RunData) -> go.Figure:
    table = data.table
    done = table["finished"]
    if not done.any():
        return empty_figure("throughput", "no data: no request finished")
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    edges = time_bins(data.start_s, data.end_s)
    centers = (edges[:-1] + edges[1:]) / 2
    finish = np.where(done, table["finish_s"], np.nan)
    series = (
        (binned_rate(finish, edges), "completed requests/s", "throughput_rps"),
        (
            binned_rate(finish, edges, table["output_tokens"].astype(float)),
            "output tokens/s",
            "throughput_tok_s",
        ),
    )
    window = data.summary.get("steady_state") or {}
    for row, (rate, label, key) in enumerate(series, start=1):
        fig.add_trace(
            go.Scatter(x=f32(centers), y=f32(rate), mode="lines", line_shape="hvh", name=label),
            row=row,
            col=1,
        )
        steady = window.get(key)
        if steady is not None and None not in data.window:
            fig.add_trace(
                go.Scatter(
                    x=list(data.window),
                    y=[steady, steady],
                    mode="lines",
                    line={"dash": "dash", "color": "black", "width": 1},
                    name=f"steady window mean, {label}",
                ),
                row=row,
                col=1,
            )
        fig.update_yaxes(title_text=label, rangemode="tozero", row=row, col=1)
        data.shade(fig, row=row, col=1)
    fig.update_xaxes(title_text=data.time_axis, row=2, col=1)
    return layout(fig, "throughput", height=520, showlegend=False)


def arrival_figure(data: RunData) -> go.Figure:
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=["TTFT (ms)", "queueing delay: first scheduled - arrival (ms)"],
    )
    table = data.table
    arrival = table["arrival_s"]
    for row, (values, label) in enumerate(
        (
            (table["ttft_s"], "TTFT"),
            (table["first_scheduled_s"] - arrival, "queueing delay"),
        ),
        start=1,
    ):
        known = ~np.isnan(values)
        if not known.any():
            unseen = data.observed and label == "queueing delay"
            text = "not observable: a client does not see when a request is scheduled"
            mark_empty(fig, text if unseen else f"none: no request has a {label}", row=row, col=1)
            continue
        index = np.flatnonzero(known)[downsample_indices(int(known.sum()))]
        fig.add_trace(
            go.Scatter(
                x=f32(arrival[index]),
                y=f32(values[index] * 1000.0),
                mode="markers",
                marker={"size": 3, "opacity": 0.5},
                name=label,
            ),
            row=row,
            col=1,
        )
        fig.update_yaxes(title_text="ms", rangemode="tozero", row=row, col=1)
        data.shade(fig, row=row, col=1)
    fig.update_xaxes(title_text="arrival time (s)", row=2, col=1)
    return layout(fig, "arrival", height=560, showlegend=False)


def preemption_figure(data: RunData) -> go.Figure:
    fig = go.Figure()
    order = np.argsort(data.steps["time_s"], kind="stable")
    times = data.steps["time_s"][order]
    # Cumulate before thinning so the curve keeps every preemption, even skipped ones.
    cumulative = np.cumsum(data.steps["num_preempted"][order].astype(np.float64))
    if not times.size or not cumulative[-1]:
        mark_empty(fig, "no data" if not times.size else "none: no request was preempted")
        return layout(fig, "preemptions", height=200, showlegend=False)
    keep = downsample_indices(times.size)
    fig.add_trace(
        go.Scatter(x=f32(times[keep]), y=f32(cumulative[keep]), mode="lines", line_shape="hv")
    )
    data.shade(fig)
    fig.update_xaxes(title_text=data.time_axis)
    fig.update_yaxes(title_text="preemptions so far", rangemode="tozero")
    return layout(fig, "preemptions", showlegend=False)
