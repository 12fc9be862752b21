"""capacity.html: the configurations' capacities and costs (the cheapest that meets the
SLO marked), and for each SLO term its figure against the arrival rate, every probe of
every configuration (filled: met the whole SLO, open: missed it), the limit dashed and
each configuration's chosen rate marked by a dotted line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import plotly.colors
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
from sim.sweep.capacity import CapacityPlan
from sim.sweep.store import write_text
from sim.sweep.tables import figure_text

_COLORS = plotly.colors.qualitative.Plotly + plotly.colors.qualitative.Dark24


def attainment_figure(plan: CapacityPlan) -> go.Figure:
    metrics = list(dict.fromkeys(b.metric for c in plan.configs for b in c.bounds))
    fig = make_subplots(
        rows=len(metrics),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=[f"{m} against arrival rate" for m in metrics],
    )
    drawn = 0
    for n, config in enumerate(plan.configs):
        color = _COLORS[n % len(_COLORS)]
        probes = sorted(config.probes, key=lambda p: p.rate)
        for row, metric in enumerate(metrics, start=1):
            bound = next((b for b in config.bounds if b.metric == metric), None)
            if bound is None:
                continue
            points = [(p.rate, bound.value(p.summary), p.passed) for p in probes if p.summary]
            points = [p for p in points if p[1] is not None]
            drawn += len(points)
            fig.add_trace(
                go.Scatter(
                    x=[p[0] for p in points],
                    y=[p[1] for p in points],
                    mode="lines+markers",
                    name=f"#{config.index} {config.describe()}",
                    legendgroup=str(config.index),
                    showlegend=row == 1,
                    line={"color": color},
                    marker={
                        "size": 9,
                        "symbol": ["circle" if p[2] else "circle-open" for p in points],
                    },
                    hovertemplate="%{x:.4g} req/s: %{y:.4g}<extra></extra>",
                ),
                row=row,
                col=1,
            )
            fig.add_hline(y=bound.limit, line_dash="dash", line_color="#888", row=row, col=1)
            if config.search.lo:
                fig.add_vline(x=config.search.lo, line_dash="dot", line_color=color, row=row, col=1)
    if not drawn:
        mark_empty(fig, "none: no probe produced these figures")
    fig.update_yaxes(type="log")
    fig.update_xaxes(title_text="arrival rate (req/s)", row=len(metrics), col=1)
    fig.update_layout(
        template=TEMPLATE,
        height=320 * len(metrics) + 80,
        title="SLO attainment against rate "
        "(filled: met, open: missed; dashed: limit; dotted: capacity)",
    )
    return fig


def write_capacity_page(path: Path, plan: CapacityPlan, rows: Sequence[Mapping[str, Any]]) -> Path:
    keys = [k for k, _ in plan.vary]
    header = [
        "#",
        *keys,
        "capacity (req/s)",
        "status",
        "tok/s at capacity",
        "GPUs",
        "$/GPU-h",
        "$ per M output tokens",
        "cheapest",
    ]
    table = []
    for row in rows:
        table.append(
            [
                str(row["config"]),
                *(str(row[k]) for k in keys),
                figure_text(row["capacity_rps"]),
                row["status"],
                _num(row["throughput_tok_s_at_capacity"]),
                str(row["gpus"]),
                _num(row["usd_per_gpu_hour"]),
                _num(row["usd_per_million_output_tokens"]),
                "cheapest" if row["cheapest"] else "",
            ]
        )
    slo = "; ".join(dict.fromkeys(b.text() for c in plan.configs for b in c.bounds))
    facts = [
        ["scenario", str(plan.base)],
        ["SLO", slo + " (steady window; an overloaded run misses)"],
        ["tolerance", f"{plan.tolerance:g} of the rate"],
        ["configurations", str(len(plan.configs))],
    ]
    sources = sorted({r["price_source"] for r in rows if r["price_source"]})
    parts = [
        html_table([], facts, css_class="facts", numeric=()),
        html_table(header, table, numeric=range(len(keys) + 1, len(header) - 1)),
        *(f'<p class="note">Price: {s}</p>' for s in sources),
        figure_div(attainment_figure(plan), "attainment"),
    ]
    write_text(path, page("Capacity", "\n".join(parts), plotly_script_src(path)))
    return path


def _num(value) -> str:
    return figure_text(value)
