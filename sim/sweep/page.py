"""sweep.html: each headline metric against each axis (one line per combination of the
other axes; seeds aggregated into the mean, with the spread from min to max as error
bars) and a latency-throughput Pareto view, over a table of the configurations.
plotly.js is the sweep's own plotly.min.js (sim.output.page)."""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sim.output.page import (
    TEMPLATE,
    figure_div,
    html_table,
    mark_empty,
    page,
    plotly_script_src,
)
from sim.sweep.points import Point, flatten
from sim.sweep.spec import Sweep, axis_text, describe
from sim.sweep.store import Outcomes, write_text
from sim.sweep.tables import figure_text

#: (summary path, label) of the metrics drawn against every axis.
METRICS = (
    ("throughput_tok_s", "output tokens/s"),
    ("goodput", "goodput (share meeting the SLO)"),
    ("ttft_s.p99", "TTFT p99 (s)"),
    ("tpot_s.p99", "TPOT p99 (s)"),
    ("e2e_s.p99", "E2E p99 (s)"),
    ("kv.peak_used_fraction", "peak KV use (share of the pool)"),
    ("num_preemptions", "preemptions"),
)

#: The Pareto view: throughput (more is better) against latency (less is better).
PARETO_X = ("throughput_tok_s", "output tokens/s (mean over seeds)")
PARETO_Y = ("ttft_s.p99", "TTFT p99 (s, mean over seeds)")


def configurations(
    points: Sequence[Point], outcomes: Outcomes
) -> dict[tuple[str, ...], list[dict[str, Any]]]:
    """The finished points' flattened summaries by configuration (axis values as text,
    in axis order), seeds together."""
    configs: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for point in points:
        summary, error = outcomes.get(point.key, (None, "not run"))
        key = tuple(axis_text(v) for v in point.values.values())
        configs.setdefault(key, [])
        if error is None and summary is not None:
            warnings = [w for w in summary.get("warnings") or () if isinstance(w, str)]
            configs[key].append({**flatten(summary), "warnings": warnings})
    return configs


def verdicts(rows: Sequence[Mapping[str, Any]]) -> str:
    """The seeds' steady-state verdicts: one word where they agree ("stable"), else
    each with its count ("stable 1, overloaded 1"); "-" with no finished seed."""
    counts = Counter(str(row.get("steady_state.verdict", "-")) for row in rows)
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{verdict} {n}" for verdict, n in sorted(counts.items())) or "-"


def _stats(rows: Sequence[Mapping[str, Any]], metric: str) -> tuple[float, float, float] | None:
    values = [r.get(metric) for r in rows]
    values = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not values:
        return None
    return float(np.mean(values)), min(values), max(values)


def axis_figure(axes: Sequence[str], axis: int, configs) -> go.Figure:
    """The metrics against ``axes[axis]``: a line per combination of the other axes."""
    fig = make_subplots(
        rows=len(METRICS),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.03,
        subplot_titles=[label for _, label in METRICS],
    )
    x_order = list(dict.fromkeys(key[axis] for key in configs))
    lines: dict[tuple[str, ...], dict[str, list]] = {}
    for key, rows in configs.items():
        others = key[:axis] + key[axis + 1 :]
        lines.setdefault(others, {}).setdefault(key[axis], []).extend(rows)
    for row, (metric, _) in enumerate(METRICS, start=1):
        for n, (others, by_x) in enumerate(lines.items()):
            xs, means, plus, minus = [], [], [], []
            for x in x_order:
                stats = _stats(by_x.get(x, []), metric)
                if stats is not None:
                    xs.append(x)
                    means.append(stats[0])
                    plus.append(stats[2] - stats[0])
                    minus.append(stats[0] - stats[1])
            name = describe(dict(zip([a for i, a in enumerate(axes) if i != axis], others)))
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=means,
                    mode="lines+markers",
                    name=name,
                    legendgroup=name,
                    showlegend=row == 1,
                    line={"color": _color(n)},
                    error_y={"type": "data", "array": plus, "arrayminus": minus, "visible": True},
                ),
                row=row,
                col=1,
            )
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=x_order)
    fig.update_xaxes(title_text=axes[axis], row=len(METRICS), col=1)
    fig.update_layout(
        height=230 * len(METRICS),
        title=f"Metrics against {axes[axis]}",
        margin={"t": 60},
        template=TEMPLATE,
    )
    return fig


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both counts (higher x, lower y),
    by increasing x."""
    order = sorted(range(len(points)), key=lambda i: (-points[i][0], points[i][1]))
    front, best_y = [], float("inf")
    for i in order:
        if points[i][1] < best_y:
            front.append(i)
            best_y = points[i][1]
    return sorted(front, key=lambda i: points[i][0])


def pareto_figure(axes: Sequence[str], configs) -> go.Figure:
    fig = go.Figure()
    labels, xy = [], []
    for key, rows in configs.items():
        x, y = _stats(rows, PARETO_X[0]), _stats(rows, PARETO_Y[0])
        if x is not None and y is not None:
            labels.append(describe(dict(zip(axes, key))))
            xy.append((x[0], y[0]))
    if not xy:
        mark_empty(fig, "none: no finished point has both figures")
        return fig
    front = pareto_front(xy)
    fig.add_trace(
        go.Scatter(
            x=[p[0] for p in xy],
            y=[p[1] for p in xy],
            mode="markers",
            name="configuration",
            text=labels,
            hovertemplate="%{text}<br>%{x:.4g} tok/s, %{y:.4g} s<extra></extra>",
            marker={"size": 9, "color": "#1f77b4"},
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[xy[i][0] for i in front],
            y=[xy[i][1] for i in front],
            mode="lines+markers+text",  # each point of the front says which it is
            name="Pareto front",
            text=[labels[i] for i in front],
            textposition=_label_positions(len(front)),
            cliponaxis=False,  # a label may reach into the margins, never be cut
            hovertemplate="%{text}<extra>front</extra>",
            marker={"size": 12, "color": "#d62728", "symbol": "diamond"},
            line={"dash": "dot"},
        )
    )
    fig.update_layout(
        title="Latency against throughput (better: right and down)",
        xaxis_title=PARETO_X[1],
        yaxis_title=PARETO_Y[1],
        height=520,
        template=TEMPLATE,
        margin={"t": 90, "b": 90, "l": 90, "r": 140},
    )
    fig.update_xaxes(automargin=True)
    return fig


def _warnings_html(axes: Sequence[str], configs) -> str:
    """What the runs show could not have mattered (a policy that never chose, say), once
    per configuration and warning: a sweep over such a setting varies nothing."""
    items = []
    for key, rows in configs.items():
        for warning in dict.fromkeys(w for row in rows for w in row["warnings"]):
            where = describe(dict(zip(axes, key))) or "every point"
            items.append(f"<li>{html.escape(where)}: {html.escape(warning)}</li>")
    if not items:
        return ""
    return '<h2>Warnings</h2>\n<ul class="warnings">\n' + "\n".join(items) + "\n</ul>"


def _label_positions(count: int) -> list[str]:
    """Where each label of the front (by increasing x) goes: neighbours above and below
    in turn, the ends' labels toward the inside so they stay in the figure."""
    positions = ["top" if n % 2 == 0 else "bottom" for n in range(count)]
    sides = ["center"] * count
    if count > 1:
        sides[0], sides[-1] = "right", "left"
    return [f"{v} {h}" for v, h in zip(positions, sides, strict=True)]


def write_sweep_page(path: Path, sweep: Sweep, points: Sequence[Point], outcomes: Outcomes) -> Path:
    """Write sweep.html (whole) into its folder, beside the sweep's plotly.min.js."""
    axes = sweep.spec.axes()
    configs = configurations(points, outcomes)
    failed = sum(1 for p in points if outcomes.get(p.key, (None, "not run"))[1] is not None)
    facts = [
        ["base scenario", str(sweep.base)],
        ["axes", ", ".join(axes) or "none (seeds only)"],
        ["seeds", ", ".join(map(str, sweep.seeds()))],
        ["set on every point", describe(sweep.spec.set) if sweep.spec.set else "nothing"],
        ["points", f"{len(points)} ({len(points) - failed} ok, {failed} failed)"],
    ]
    parts = [html_table([], facts, css_class="facts", numeric=())]
    header = [*axes, "seeds ok", "verdict", *(label for _, label in METRICS)]
    rows = []
    for key, flat in configs.items():
        cells = []
        for metric, _ in METRICS:
            stats = _stats(flat, metric)
            cells.append(figure_text(None if stats is None else stats[0]))
        rows.append([*key, str(len(flat)), verdicts(flat), *cells])
    parts.append("<h2>Configurations (mean over seeds)</h2>")
    numeric = [len(axes), *range(len(axes) + 2, len(header))]  # (the verdict is a word)
    parts.append(html_table(header, rows, numeric=numeric))
    parts.append(_warnings_html(axes, configs))
    for i in range(len(axes)):
        parts.append(figure_div(axis_figure(axes, i, configs), f"axis-{i}"))
    parts.append(figure_div(pareto_figure(axes, configs), "pareto"))
    text = page(f"Sweep {sweep.name}", "\n".join(parts), plotly_script_src(path))
    write_text(path, text)
    return path


def _color(n: int) -> str:
    import plotly.colors

    palette = plotly.colors.qualitative.Plotly + plotly.colors.qualitative.Dark24
    return palette[n % len(palette)]
