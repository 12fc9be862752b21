"""validation.html: what ``pagesim validate`` measured, on one page.

On top, the facts (scenario, device, steps measured, load) and whether the target was
met; then the errors as an HTML table with readable names (each metric measured, and
each model's prediction with its relative error), the calibrated model's mean error by
step kind, its coefficients with their units, and the figures: predicted against
measured step times, and the TTFT, TPOT and E2E CDFs of the three runs. plotly.js is
written once beside the page (sim.output.page).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sim.output.page import (
    LATENCY_COLUMNS,
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

__all__ = ["COEFFICIENT_UNITS", "METRIC_NAMES", "coefficient_text", "write_html"]

#: Readable names of validation.json's end-to-end keys.
METRIC_NAMES = {
    **{
        f"{key}.{q}": f"{label} {q}"
        for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E"))
        for q in ("p50", "p90", "p99")
    },
    "throughput_rps": "throughput (requests/s)",
    "throughput_tok_s": "throughput (output tokens/s)",
}

#: What each calibrated coefficient is paid per (sim.costs.calibrated), its unit.
COEFFICIENT_UNITS = {
    "step": "per step",
    "decode_step": "per step that decodes",
    "tokens": "per token computed (prefill and decode)",
    "seqs": "per sequence (prefill chunks and decodes)",
    "prefill_chunks": "per prefill chunk",
    "prefill_cached_pairs": "per (new token, cached token) pair",
    "prefill_new_pairs": "per causal pair of a chunk's new tokens",
    "prefill_context": "per KV token a prefill chunk reads",
    "decode_context": "per KV token a decode reads",
    "decode_padded": "per KV token of the batch padded to its longest context",
    "swapped_blocks": "per block swapped",
    "copied_blocks": "per block copied",
}

_COLOURS = {"measured": "#222222", "calibrated": "#1f77b4", "analytic": "#d62728"}


def coefficient_text(seconds: float) -> str:
    """A time per unit in the unit that reads best (s, ms, us, ns, ps)."""
    if seconds == 0:
        return "0"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-12:.3g} ps"


def _pct(value: float | None, signed: bool = True) -> str:
    if value is None:
        return "n/a"
    return f"{100 * value:+.1f}%" if signed else f"{100 * value:.1f}%"


def _value(key: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    if key.startswith("throughput"):
        return f"{value:,.2f}"
    return f"{1e3 * value:,.2f} ms"


def _error_table(report: dict[str, Any]) -> str:
    per_step = report["per_step"]
    rows = [
        [
            "per-step mean absolute error (MAPE)",
            "",
            _pct(per_step["calibrated"]["mape"], False),
            _pct(per_step["analytic"]["mape"], False),
        ],
        [
            "per-step p90 absolute error",
            "",
            _pct(per_step["calibrated"]["p90_ape"], False),
            _pct(per_step["analytic"]["p90_ape"], False),
        ],
    ]
    e2e = report["end_to_end"]
    for key, measured in e2e["calibrated"].items():
        cells = [METRIC_NAMES.get(key, key), _value(key, measured["measured"])]
        for model in ("calibrated", "analytic"):
            entry = e2e[model][key]
            cells.append(f"{_value(key, entry['predicted'])} ({_pct(entry['rel_error'])})")
        rows.append(cells)
    header = ["error against the measured run", "measured", "calibrated", "analytic"]
    return html_table(header, rows, css_class="errors")


def _facts(report: dict[str, Any]) -> list[tuple[str, str]]:
    target = report["target"]
    fit = report["calibration"]["fit"]
    load = report["measurement"]["load_average_1min"]
    return [
        ("scenario", str(report["scenario"])),
        ("model", f"{report['model']} ({report['dtype']}) on {report['device']}"),
        ("measured steps", f"{report['num_measured_steps']:,}"),
        ("date (UTC)", str(report["date"])),
        ("load average (before, after)", ", ".join(str(v) for v in load)),
        (
            "calibration held-out MAPE",
            f"{_pct(fit.get('heldout_mape'), False)} "
            f"({fit.get('heldout_rows', '?')} of {fit.get('rows', '?')} shapes)",
        ),
        (
            "target",
            f"per-step MAPE and p50 TTFT/TPOT within {100 * target['bound']:.0f}%: "
            + ("met" if target["met"] else "NOT met"),
        ),
    ]


def _kind_table(report: dict[str, Any]) -> str:
    rows = [
        [kind, f"{entry['steps']:,}", _pct(entry["mean_rel_error"])]
        for kind, entry in report["per_step_by_kind"].items()
    ]
    return html_table(["step kind", "steps", "calibrated mean error"], rows)


def _coefficient_table(report: dict[str, Any]) -> str:
    rows = [
        [name, coefficient_text(value), COEFFICIENT_UNITS.get(name, "")]
        for name, value in report["calibration"]["coefficients"].items()
    ]
    return html_table(["coefficient", "value", "unit"], rows, numeric=(1,))


def write_html(validation, path: str | Path) -> Path:
    """Write validation.html to ``path`` and plotly.min.js beside it; return ``path``."""
    path = Path(path)
    report = validation.report
    figures = [
        figure_div(_scatter_figure(validation), "steps"),
        figure_div(_cdf_figure(validation), "cdf"),
    ]
    body = "\n".join(
        [
            html_table([], _facts(report), css_class="facts", numeric=()),
            "<h2>Errors</h2>",
            '<p class="note">Relative error: (model - measured) / measured.</p>',
            _error_table(report),
            "<h2>Calibrated model</h2>",
            _kind_table(report),
            _coefficient_table(report),
            *figures,
        ]
    )
    title = f"pagesim validation: {validation.scenario.name}"
    path.write_text(page(title, body, plotly_script_src(path)), encoding="utf-8")
    return path


def _scatter_figure(validation):
    import plotly.graph_objects as go

    measured_ms = validation.measured_s * 1e3
    keep = downsample_indices(measured_ms.size)
    fig = go.Figure()
    for name, predicted in validation.predictions.items():
        fig.add_trace(
            go.Scatter(
                x=measured_ms[keep],
                y=predicted[keep] * 1e3,
                mode="markers",
                name=name,
                marker={"size": 5, "opacity": 0.6, "color": _COLOURS[name]},
            )
        )
    every = np.concatenate([measured_ms] + [p * 1e3 for p in validation.predictions.values()])
    positive = every[every > 0]
    if positive.size:
        low, high = float(positive.min()), float(positive.max())
        fig.add_trace(
            go.Scatter(
                x=[low, high],
                y=[low, high],
                mode="lines",
                name="identity",
                line={"color": "grey", "dash": "dash"},
            )
        )
    else:
        mark_empty(fig, "no data: no step was measured")
    fig.update_layout(
        title="Step time: predicted vs measured (each step the measured run executed)",
        xaxis={"title": "measured (ms)", "type": "log"},
        yaxis={"title": "predicted (ms)", "type": "log"},
        template="plotly_white",
        height=520,
    )
    return fig


def _cdf_figure(validation):
    import plotly.graph_objects as go

    from sim.output.requests import request_table

    fig = latency_cdf_grid()
    tables = {name: request_table(run.outcomes) for name, run in validation.runs.items()}
    for col, (label, column) in enumerate(LATENCY_COLUMNS, start=1):
        drawn = False
        for name, table in tables.items():
            values, fraction = cdf_ms(table[column])
            if not values.size:
                continue
            line = {"color": _COLOURS[name], "shape": "hv"}
            fig.add_trace(
                go.Scatter(
                    x=values,
                    y=fraction,
                    mode="lines",
                    name=name,
                    legendgroup=name,
                    showlegend=col == 1,
                    line=line,
                ),
                row=1,
                col=col,
            )
            drawn = True
        finish_cdf_panel(fig, col, drawn, f"none: no request has a {label}", top=1.02)
    fig.update_yaxes(title_text="fraction of requests", row=1, col=1)
    fig.update_layout(title="Latency CDFs of the three runs", template="plotly_white", height=460)
    return fig
