"""The one-page HTML report of a run: the stability verdict and the summary table on top,
then plotly figures.

Figures: latency CDFs (TTFT, TPOT, E2E), the KV pool split over time (stacked area, one
replica at a time with a selector when there are several), batch size and queue length,
and cumulative preemptions. plotly.js is embedded once so the page works offline; step
series are thinned to at most `MAX_POINTS` points per trace so big runs stay small.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from sim.engine.records import RequestOutcome
from sim.output.requests import request_table
from sim.output.steplog import KV_SPLIT_COLUMNS, KV_SPLIT_KEYS, STEP_COLUMNS, StepLog
from sim.output.tables import summary_rows

__all__ = ["FIGURE_TITLES", "MAX_POINTS", "downsample_indices", "write_report"]

#: Title of each figure on the page, by its div id.
FIGURE_TITLES = {
    "latency": "Latency distributions (CDF)",
    "kv": "KV pool split over time",
    "load": "Batch size and queue length over time",
    "preemptions": "Preemptions over time (cumulative)",
}
MAX_POINTS = 5000

_COL = {name: i for i, name in enumerate(STEP_COLUMNS)}
_KV_COLORS = ("#1f77b4", "#9ecae1", "#ff7f0e", "#d62728", "#c7c7c7")
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; }
table.summary { border-collapse: collapse; margin-bottom: 1.5em; }
table.summary td { padding: 2px 12px; border-bottom: 1px solid #eee; }
table.summary td.value { text-align: right; font-variant-numeric: tabular-nums; }
p.verdict { padding: 0.6em 1em; border-left: 6px solid #999; background: #f6f6f6; }
p.verdict.stable { border-color: #2ca02c; }
p.verdict.overloaded { border-color: #d62728; }
p.verdict.too-short { border-color: #ff7f0e; }
"""


def write_report(
    out_dir: str | Path,
    outcomes: Iterable[RequestOutcome],
    steps: StepLog,
    summary: Mapping[str, Any],
    title: str,
) -> Path:
    """Write `out_dir`/report.html (directory created if missing, file overwritten) and
    return its path. Reads its inputs only; any run, even one with no finished request
    or no step, gives a valid page (empty figures say "no data")."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = request_table(outcomes)
    rows = steps.as_array()
    figures = {
        "latency": _latency_figure(table),
        "kv": _kv_figure(rows, summary.get("total_slots")),
        "load": _load_figure(rows),
        "preemptions": _preemption_figure(rows),
    }
    parts = [
        pio.to_html(fig, include_plotlyjs=(i == 0), full_html=False, div_id=name)
        for i, (name, fig) in enumerate(figures.items())
    ]
    page = _page(title, _verdict_html(summary) + _summary_html(summary), parts)
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


def downsample_indices(num_points: int, max_points: int = MAX_POINTS) -> np.ndarray:
    """Evenly spaced indices into a series of `num_points`, at most `max_points` of them,
    always keeping the first and the last point. Deterministic (no sampling)."""
    if num_points <= max_points:
        return np.arange(num_points)
    return np.unique(np.linspace(0, num_points - 1, max_points).round().astype(np.int64))


# --------------------------------------------------------------------------- figures


def _layout(fig: go.Figure, name: str, **kwargs) -> go.Figure:
    fig.update_layout(title=FIGURE_TITLES[name], template="plotly_white", height=420, **kwargs)
    return fig


def _no_data(fig: go.Figure) -> None:
    fig.add_annotation(text="no data", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)


def _latency_figure(table: Mapping[str, np.ndarray]) -> go.Figure:
    names = (("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("E2E", "e2e_s"))
    fig = make_subplots(rows=1, cols=3, subplot_titles=[f"{label} (ms)" for label, _ in names])
    for col, (label, key) in enumerate(names, start=1):
        values = np.sort(table[key][~np.isnan(table[key])]) * 1000.0
        keep = downsample_indices(values.size)
        cdf = (np.arange(values.size) + 1) / max(values.size, 1)
        fig.add_trace(
            go.Scatter(x=values[keep], y=cdf[keep], mode="lines", name=label), row=1, col=col
        )
        fig.update_xaxes(title_text="ms", row=1, col=col)
    fig.update_yaxes(title_text="fraction of requests", range=[0, 1.02], row=1, col=1)
    if not table["ttft_s"].size:
        _no_data(fig)
    return _layout(fig, "latency", showlegend=False)


def _replica_rows(rows: np.ndarray) -> dict[int, np.ndarray]:
    """Rows per replica, each in time order (stable, so equal times keep log order)."""
    replicas = rows[:, _COL["replica"]].astype(np.int64)
    result = {}
    for replica in np.unique(replicas).tolist():
        mine = rows[replicas == replica]
        result[replica] = mine[np.argsort(mine[:, _COL["time_s"]], kind="stable")]
    return result


def _kv_figure(rows: np.ndarray, total_slots) -> go.Figure:
    fig = go.Figure()
    per_replica = _replica_rows(rows)
    scale = 100.0 / total_slots if total_slots else 1.0
    unit = "% of slots" if total_slots else "slots"
    for replica, mine in per_replica.items():
        keep = downsample_indices(mine.shape[0])
        for key, column, color in zip(KV_SPLIT_KEYS, KV_SPLIT_COLUMNS, _KV_COLORS):
            fig.add_trace(
                go.Scatter(
                    x=mine[keep, _COL["time_s"]],
                    y=mine[keep, _COL[column]] * scale,
                    name=key.replace("_", " "),
                    legendgroup=key,
                    stackgroup=f"replica{replica}",
                    line={"width": 0.5, "color": color},
                    visible=replica == min(per_replica),
                )
            )
    if len(per_replica) > 1:
        fig.update_layout(updatemenus=[_replica_selector(list(per_replica), len(KV_SPLIT_KEYS))])
    if not per_replica:
        _no_data(fig)
    fig.update_xaxes(title_text="simulated time (s)")
    fig.update_yaxes(title_text=unit)
    return _layout(fig, "kv")


def _replica_selector(replicas: list[int], traces_per_replica: int) -> dict:
    """A dropdown showing one replica's traces at a time."""
    buttons = []
    for i, replica in enumerate(replicas):
        visible = [j // traces_per_replica == i for j in range(len(replicas) * traces_per_replica)]
        buttons.append(
            {"label": f"replica {replica}", "method": "restyle", "args": ["visible", visible]}
        )
    return {"buttons": buttons, "direction": "down", "x": 1.0, "xanchor": "right", "y": 1.15}


def _load_figure(rows: np.ndarray) -> go.Figure:
    fig = go.Figure()
    per_replica = _replica_rows(rows)
    for replica, mine in per_replica.items():
        keep = downsample_indices(mine.shape[0])
        suffix = f" (replica {replica})" if len(per_replica) > 1 else ""
        for column, label, dash in (
            ("batch_size", "batch size", None),
            ("queue_len", "queue length", "dot"),
        ):
            fig.add_trace(
                go.Scatter(
                    x=mine[keep, _COL["time_s"]],
                    y=mine[keep, _COL[column]],
                    mode="lines",
                    name=label + suffix,
                    line={"dash": dash},
                )
            )
    if not per_replica:
        _no_data(fig)
    fig.update_xaxes(title_text="simulated time (s)")
    fig.update_yaxes(title_text="requests")
    return _layout(fig, "load")


def _preemption_figure(rows: np.ndarray) -> go.Figure:
    fig = go.Figure()
    order = np.argsort(rows[:, _COL["time_s"]], kind="stable")
    times = rows[order, _COL["time_s"]]
    # Cumulate before thinning so the curve keeps every preemption, even skipped ones.
    cumulative = np.cumsum(rows[order, _COL["num_preempted"]])
    keep = downsample_indices(times.size)
    fig.add_trace(go.Scatter(x=times[keep], y=cumulative[keep], mode="lines", line_shape="hv"))
    if not times.size:
        _no_data(fig)
    fig.update_xaxes(title_text="simulated time (s)")
    fig.update_yaxes(title_text="preemptions so far")
    return _layout(fig, "preemptions", showlegend=False)


# ------------------------------------------------------------------------------ page


def _verdict_html(summary: Mapping[str, Any]) -> str:
    """The stability verdict as a banner above the summary table."""
    window = summary.get("steady_state") or {}
    verdict = window.get("verdict")
    if verdict is None:
        return ""
    css = verdict.replace(" ", "-")
    limited = window.get("limited_by")
    limiter = f" Limited by {html.escape(limited)}." if limited else ""
    return (
        f'<p class="verdict {css}"><strong>{html.escape(verdict)}</strong>: '
        f"{html.escape(window.get('reason', ''))}.{limiter}</p>\n"
    )


def _summary_html(summary: Mapping[str, Any]) -> str:
    rows = summary_rows(summary)
    reasons = summary.get("rejected_reasons") or {}
    rows += [(f"rejected: {reason}", str(count)) for reason, count in sorted(reasons.items())]
    cells = "\n".join(
        f'<tr><td>{html.escape(label)}</td><td class="value">{html.escape(value)}</td></tr>'
        for label, value in rows
    )
    return f'<table class="summary">\n{cells}\n</table>'


def _page(title: str, summary_table: str, figures: list[str]) -> str:
    escaped = html.escape(title)
    body = "\n".join(f'<section class="figure">\n{part}\n</section>' for part in figures)
    return (
        '<!DOCTYPE html>\n<html>\n<head>\n<meta charset="utf-8">\n'
        f"<title>{escaped}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        f"<h1>{escaped}</h1>\n{summary_table}\n{body}\n</body>\n</html>\n"
    )
