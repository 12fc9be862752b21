"""The tables the sweep commands print: a few headline columns of points.csv (or
capacity.csv), aligned, numbers to four significant figures."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

#: Columns of points.csv the printed table shows after the axes (header, column).
SWEEP_COLUMNS = (
    ("status", "status"),
    ("tok/s", "throughput_tok_s"),
    ("goodput", "goodput"),
    ("TTFT p99 s", "ttft_s.p99"),
    ("TPOT p99 s", "tpot_s.p99"),
    ("verdict", "steady_state.verdict"),
)

#: Most rows printed; points.csv has them all.
MAX_ROWS = 40


def number(text: str) -> str:
    """A CSV cell for people: numbers to four significant figures, others as they are."""
    try:
        value = float(text)
    except ValueError:
        return text
    if value.is_integer() and abs(value) < 1e15:
        return f"{int(value):,}" if "." not in text else f"{value:.4g}"
    if 1e3 <= abs(value) < 1e15:  # whole units, grouped: 11,580, not 1.158e+04
        return f"{value:,.0f}"
    return f"{value:.4g}"


def figure_text(value: float | None) -> str:
    """A figure for people, as :func:`number` writes it; "-" for none."""
    return "-" if value is None else number(repr(float(value)))


def aligned(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    lines = ["  ".join(str(c).rjust(w) for c, w in zip(line, widths)) for line in [header, *rows]]
    return "\n".join(lines)


def sweep_table(out: Path) -> str:
    """The printed view of ``out``/points.csv."""
    keys = json.loads((out / "sweep.json").read_text())["axes"]
    with open(out / "points.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    header = ["point", *keys, "seed", *(h for h, _ in SWEEP_COLUMNS)]
    cells = [
        [
            row["point"],
            *(row.get(k, "") for k in keys),
            row["seed"],
            *(number(row.get(c, "")) for _, c in SWEEP_COLUMNS),
        ]
        for row in rows[:MAX_ROWS]
    ]
    text = aligned(header, cells)
    if len(rows) > MAX_ROWS:
        text += f"\n... {len(rows) - MAX_ROWS} more rows in {out / 'points.csv'}"
    return text + _failures(rows)


def _failures(rows: Sequence[dict]) -> str:
    """Why points failed, one line each (the first MAX_ROWS; points.csv has every one)."""
    failed = [row for row in rows if row.get("status") == "failed"]
    lines = [f"point {row['point']} failed: {row.get('error', '')}" for row in failed[:MAX_ROWS]]
    if len(failed) > MAX_ROWS:
        lines.append(f"... {len(failed) - MAX_ROWS} more failed points in points.csv")
    return "".join(f"\n{line}" for line in lines)


def capacity_table(rows: Sequence[dict], keys: Sequence[str]) -> str:
    """The printed view of capacity.csv's rows."""
    header = ["#", *keys, "capacity req/s", "status", "tok/s", "GPUs", "$/M tok", ""]
    cells = [
        [
            str(r["config"]),
            *(str(r[k]) for k in keys),
            figure_text(r["capacity_rps"]),
            r["status"],
            _maybe(r["throughput_tok_s_at_capacity"]),
            str(r["gpus"]),
            _maybe(r["usd_per_million_output_tokens"]),
            "cheapest" if r["cheapest"] else "",
        ]
        for r in rows
    ]
    return aligned(header, cells)


def _maybe(value) -> str:
    return "-" if value is None else number(repr(float(value)))
