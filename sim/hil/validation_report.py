"""What ``pagesim validate`` writes and prints: the error table, steps.csv of predicted
against measured step times, and validation.html.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np

from sim.costs.calibrated import FEATURES
from sim.hil.validation import Validation
from sim.run.runner import write_run


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:+.1f}%"


def _ms(seconds: float | None) -> str:
    """A latency for the table (a run with no multi-token output has no TPOT)."""
    return "n/a" if seconds is None else f"{1e3 * seconds:.2f} ms"


def _abs_pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def format_table(report: dict[str, Any]) -> str:
    """The validation table (markdown; also readable as plain text)."""
    lines = [
        "| error vs measured | calibrated | analytic |",
        "| --- | ---: | ---: |",
    ]
    per_step = report["per_step"]
    for key, label in (("mape", "per-step MAPE"), ("p90_ape", "per-step p90 APE")):
        values = [_abs_pct(per_step[name][key]) for name in ("calibrated", "analytic")]
        lines.append(f"| {label} | {values[0]} | {values[1]} |")
    e2e = report["end_to_end"]
    for key in e2e["calibrated"]:
        values = [_pct(e2e[name][key]["rel_error"]) for name in ("calibrated", "analytic")]
        lines.append(f"| {key} | {values[0]} | {values[1]} |")
    target = report["target"]
    verdict = "met" if target["met"] else "NOT met"
    lines.append(
        f"\n{report['num_measured_steps']} measured steps on {report['device']}; target "
        f"(per-step MAPE and p50 TTFT/TPOT within {100 * target['bound']:.0f}%): {verdict}"
    )
    kinds = report["per_step_by_kind"]
    lines.append(
        "calibrated mean per-step error by step kind: "
        + ", ".join(f"{k} {_pct(v['mean_rel_error'])} ({v['steps']})" for k, v in kinds.items())
    )
    measured, fit = report["runs"]["measured"], report["calibration"]["fit"]
    heldout = fit.get("heldout_mape")
    lines.append(
        f"{report['date']}: measured TTFT p50 {_ms(measured['ttft_s']['p50'])}, "
        f"TPOT p50 {_ms(measured['tpot_s']['p50'])}; calibration held-out MAPE "
        f"{_abs_pct(heldout)} ({fit.get('heldout_rows', '?')} of {fit.get('rows', '?')} "
        f"shapes); load average {report['measurement']['load_average_1min']}"
    )
    return "\n".join(lines)


def write_validation(validation: Validation, out_dir: str | Path, *, html: bool = True) -> Path:
    """Write validation.json, steps.csv, validation.html (unless ``html`` is false) and
    each run's files (no per-run HTML) into ``out_dir``; returns the directory."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "validation.json").write_text(
        json.dumps(validation.report, indent=2, sort_keys=True, allow_nan=False) + "\n"
    )
    _write_steps(validation, out / "steps.csv")
    for name, result in validation.runs.items():
        write_run(result, validation.scenario, out / name, html=False, force=True)
    if html:
        write_html(validation, out / "validation.html")
    return out


def _write_steps(validation: Validation, path: Path) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", *FEATURES, "measured_s", "calibrated_s", "analytic_s"])
        calibrated, analytic = (
            validation.predictions["calibrated"],
            validation.predictions["analytic"],
        )
        for index, record in enumerate(validation.records):
            writer.writerow(
                [index, *(f"{v:g}" for v in validation.features[index]),
                 f"{record.measured_s:.9g}",
                 f"{calibrated[index]:.9g}", f"{analytic[index]:.9g}"]
            )  # fmt: skip


_COLOURS = {"measured": "#222222", "calibrated": "#1f77b4", "analytic": "#d62728"}


def write_html(validation: Validation, path: str | Path) -> Path:
    """One self-contained page (plotly.js embedded once, works offline): the table,
    predicted vs measured step times, TTFT and TPOT CDFs of the three runs."""
    import plotly.io as pio

    figures = [_scatter_figure(validation), _cdf_figure(validation, "ttft_s", "TTFT"),
               _cdf_figure(validation, "tpot_s", "TPOT")]  # fmt: skip
    divs = [
        pio.to_html(fig, include_plotlyjs=(i == 0), full_html=False, div_id=f"figure{i}")
        for i, fig in enumerate(figures)
    ]
    table = format_table(validation.report).replace("<", "&lt;")
    title = f"pagesim validation: {validation.scenario.name}"
    page = (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title></head>"
        f"<body style='font-family:sans-serif;max-width:1100px;margin:auto'><h1>{title}</h1>"
        f"<pre>{table}</pre>{''.join(divs)}</body></html>\n"
    )
    path = Path(path)
    path.write_text(page)
    return path


def _scatter_figure(validation: Validation):
    import plotly.graph_objects as go

    from sim.output.report import downsample_indices

    measured_ms = validation.measured_s * 1e3
    keep = downsample_indices(measured_ms.size)
    fig = go.Figure()
    for name, predicted in validation.predictions.items():
        fig.add_trace(go.Scattergl(
            x=measured_ms[keep], y=predicted[keep] * 1e3, mode="markers", name=name,
            marker={"size": 5, "opacity": 0.6, "color": _COLOURS[name]},
        ))  # fmt: skip
    every = np.concatenate([measured_ms] + [p * 1e3 for p in validation.predictions.values()])
    positive = every[every > 0]
    if positive.size:
        low, high = float(positive.min()), float(positive.max())
        fig.add_trace(go.Scatter(x=[low, high], y=[low, high], mode="lines", name="identity",
                                 line={"color": "grey", "dash": "dash"}))  # fmt: skip
    fig.update_layout(
        title="Step time: predicted vs measured (each step the measured run executed)",
        xaxis={"title": "measured (ms)", "type": "log"},
        yaxis={"title": "predicted (ms)", "type": "log"},
        template="plotly_white", height=520,
    )  # fmt: skip
    return fig


def _cdf_figure(validation: Validation, column: str, label: str):
    import plotly.graph_objects as go

    from sim.output.requests import request_table

    fig = go.Figure()
    for name, result in validation.runs.items():
        values = np.sort(request_table(result.outcomes)[column])
        values = values[~np.isnan(values)] * 1e3
        if values.size:
            fraction = np.arange(1, values.size + 1) / values.size
            fig.add_trace(go.Scatter(x=values, y=fraction, mode="lines", name=name,
                                     line={"color": _COLOURS[name], "shape": "hv"}))  # fmt: skip
    fig.update_layout(
        title=f"{label} CDF of the three runs", xaxis={"title": f"{label} (ms)"},
        yaxis={"title": "fraction of requests", "range": [0, 1]},
        template="plotly_white", height=420,
    )  # fmt: skip
    return fig
