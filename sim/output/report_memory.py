"""The memory figures of a run's report (sim.output.report): the KV pool split (one
replica at a time, with a selector), the prefix cache, swap traffic and CPU pool use,
batch size and queue length (a panel per replica). Conventions: sim.output.report_figures.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sim.output.page import downsample_indices, mark_empty
from sim.output.report_figures import RunData, empty_figure, f32, layout
from sim.output.series import cluster_series, hit_rate_over_time, swap_traffic, time_bins
from sim.output.steplog import KV_SPLIT_COLUMNS, KV_SPLIT_KEYS

_KV_COLORS = ("#1f77b4", "#9ecae1", "#ff7f0e", "#d62728", "#c7c7c7")


def kv_figure(data: RunData) -> go.Figure:
    fig = go.Figure()
    total_slots = data.summary.get("total_slots")
    scale = 100.0 / total_slots if total_slots else 1.0
    first = min(data.replicas, default=None)
    for replica, mine in data.replicas.items():
        keep = downsample_indices(mine.shape[0], data.per_trace())
        for key, column, color in zip(KV_SPLIT_KEYS, KV_SPLIT_COLUMNS, _KV_COLORS):
            fig.add_trace(
                go.Scatter(
                    x=f32(data.column(mine, "time_s")[keep]),
                    y=f32(data.column(mine, column)[keep].astype(np.float64) * scale),
                    name=key.replace("_", " "),
                    legendgroup=key,
                    stackgroup=f"replica{replica}",
                    line={"width": 0.5, "color": color},
                    visible=replica == first,
                )
            )
    if len(data.replicas) > 1:
        fig.update_layout(updatemenus=[_replica_selector(list(data.replicas), len(KV_SPLIT_KEYS))])
    if not data.replicas:
        mark_empty(fig, "no data")
        return layout(fig, "kv")
    data.shade(fig)
    fig.update_xaxes(title_text=data.time_axis)
    fig.update_yaxes(title_text="% of the replica's slots" if total_slots else "slots")
    return layout(fig, "kv")


def _replica_selector(replicas: list[int], traces_per_replica: int) -> dict:
    """A dropdown showing one replica's traces at a time."""
    buttons = []
    for i, replica in enumerate(replicas):
        visible = [j // traces_per_replica == i for j in range(len(replicas) * traces_per_replica)]
        buttons.append(
            {"label": f"replica {replica}", "method": "restyle", "args": ["visible", visible]}
        )
    return {"buttons": buttons, "direction": "down", "x": 1.0, "xanchor": "right", "y": 1.15}


def _grid(data: RunData) -> np.ndarray:
    return np.linspace(data.start_s, data.end_s, 2000)


def _two_panels(top: str, bottom: str) -> go.Figure:
    """Two panels over one time axis, titled ``top`` and ``bottom``."""
    return make_subplots(
        rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1, subplot_titles=[top, bottom]
    )


def cache_figure(data: RunData) -> go.Figure:
    edges = time_bins(data.start_s, data.end_s)
    rate = hit_rate_over_time(data.table, edges)
    grid = _grid(data)
    cached, _ = cluster_series(data.steps, "cached_blocks", grid)
    hits = bool(np.nansum(rate) > 0)
    if not hits and not cached.any():
        text = "none: no prompt token came from the prefix cache, no block was cached"
        return empty_figure("cache", text)
    fig = _two_panels(
        "hit rate of the prompts first scheduled in each time bin (%)",
        "cached blocks (free, holding reusable prefixes; all replicas)",
    )
    if hits:
        centers = (edges[:-1] + edges[1:]) / 2
        fig.add_trace(
            go.Scatter(x=f32(centers), y=f32(rate * 100.0), mode="lines", line_shape="hvh"),
            row=1,
            col=1,
        )
        fig.update_yaxes(title_text="%", range=[0, 100], row=1, col=1)
        data.shade(fig, row=1, col=1)
    else:
        mark_empty(fig, "none: no prompt token came from the prefix cache", row=1, col=1)
    if cached.any():
        fig.add_trace(go.Scatter(x=f32(grid), y=f32(cached), mode="lines"), row=2, col=1)
        fig.update_yaxes(title_text="blocks", rangemode="tozero", row=2, col=1)
        data.shade(fig, row=2, col=1)
    else:
        mark_empty(fig, "none: no block held a cached prefix", row=2, col=1)
    fig.update_xaxes(title_text=data.time_axis, row=2, col=1)
    return layout(fig, "cache", height=560, showlegend=False)


def swap_figure(data: RunData) -> go.Figure:
    if not data.num_steps or not data.steps["swapped_blocks"].any():
        return empty_figure("swap", "none: no request was swapped to the CPU")
    fig = _two_panels(
        "blocks swapped per second (from the change in swapped blocks)",
        "CPU pool in use (all replicas)",
    )
    grid = _grid(data)
    swapped, _ = cluster_series(data.steps, "swapped_blocks", grid)
    edges = time_bins(data.start_s, data.end_s)
    centers = (edges[:-1] + edges[1:]) / 2
    out, back = swap_traffic(data.steps, edges)
    for values, label in ((out, "out to the CPU"), (back, "back in")):
        fig.add_trace(
            go.Scatter(x=f32(centers), y=f32(values), mode="lines", line_shape="hvh", name=label),
            row=1,
            col=1,
        )
    pool = (data.cpu_blocks or 0) * max(len(data.replicas), 1)
    scale, unit = (100.0 / pool, "% of the CPU pool") if pool else (1.0, "blocks")
    fig.add_trace(
        go.Scatter(x=f32(grid), y=f32(swapped * scale), mode="lines", name="in use"), row=2, col=1
    )
    fig.update_yaxes(title_text="blocks/s", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text=unit, rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title_text=data.time_axis, row=2, col=1)
    for row in (1, 2):
        data.shade(fig, row=row, col=1)
    return layout(fig, "swap", height=520)


def load_figure(data: RunData) -> go.Figure:
    """Batch size and queue length: one panel per replica (shared axes)."""
    replicas = data.replicas or {0: np.arange(data.num_steps)}
    fig = make_subplots(
        rows=len(replicas),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=min(0.08, 0.3 / len(replicas)),
        subplot_titles=[f"replica {r}" for r in replicas] if len(replicas) > 1 else None,
    )
    for row, mine in enumerate(replicas.values(), start=1):
        keep = downsample_indices(mine.shape[0], data.per_trace())
        for column, label, color in (
            ("batch_size", "batch size", "#1f77b4"),
            ("queue_len", "queue length", "#ff7f0e"),
        ):
            fig.add_trace(
                go.Scatter(
                    x=f32(data.column(mine, "time_s")[keep]),
                    y=f32(data.column(mine, column)[keep]),
                    mode="lines",
                    name=label,
                    legendgroup=label,
                    showlegend=row == 1,
                    line={"color": color, "width": 1},
                ),
                row=row,
                col=1,
            )
        data.shade(fig, row=row, col=1)
    if not data.replicas:
        mark_empty(fig, "no data")
    fig.update_xaxes(title_text=data.time_axis, row=len(replicas), col=1)
    fig.update_yaxes(title_text="requests", rangemode="tozero", matches="y")  # one scale
    return layout(fig, "load", height=max(420, 140 * len(replicas) + 140))
