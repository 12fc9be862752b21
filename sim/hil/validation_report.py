"""What ``pagesim validate`` writes and prints: the error table, steps.csv of predicted
against measured step times, and validation.html (sim.hil.validation_page).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from sim.costs.calibrated import FEATURES
from sim.hil.validation import Validation
from sim.hil.validation_page import write_html
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
                [
                    index,
                    *(f"{v:g}" for v in validation.features[index]),
                    f"{record.measured_s:.9g}",
                    f"{calibrated[index]:.9g}",
                    f"{analytic[index]:.9g}",
                ]
            )
