"""What every HTML page of pagesim shares (the run report, ``compare --html``, the
validation page): plotly.js as one file per output folder, the page skeleton, tables,
and the conventions of its figures (thinned series, "none" for an empty series, the
warm-up shaded).

plotly.js (about 4.8 MB) is written once, as ``plotly.min.js`` beside the page, and the
page loads it with a relative ``<script src>``: pages in one folder share one copy, and
a folder copied elsewhere (or opened without a network) still works. A caller may name
another file (shared by several folders) or a URL instead.
"""

from __future__ import annotations

import html
import os
from collections.abc import Container, Sequence
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

__all__ = [
    "LATENCY_COLUMNS",
    "MAX_POINTS",
    "PLOTLY_JS",
    "cdf_ms",
    "downsample_indices",
    "finish_cdf_panel",
    "figure_div",
    "html_table",
    "latency_cdf_grid",
    "mark_empty",
    "page",
    "plotly_script_src",
    "shade_warmup",
]

#: The file name of plotly.js beside a page.
PLOTLY_JS = "plotly.min.js"

#: The latency CDFs' panels, left to right: label and request-table column (seconds).
LATENCY_COLUMNS = (("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("E2E", "e2e_s"))

#: Most points of one trace: big runs are thinned to this (see downsample_indices).
MAX_POINTS = 5000

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
th, td { padding: 2px 12px; border-bottom: 1px solid #eee; }
th { text-align: left; border-bottom: 2px solid #ccc; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
table.facts { max-width: 36em; }
table.facts td:first-child { color: #555; white-space: nowrap; }
div.top { display: flex; flex-wrap: wrap; gap: 0 3em; align-items: flex-start; }
p.verdict { padding: 0.6em 1em; border-left: 6px solid #999; background: #f6f6f6; }
p.verdict.stable { border-color: #2ca02c; }
p.verdict.overloaded { border-color: #d62728; }
p.verdict.too-short { border-color: #ff7f0e; }
p.warning { padding: 0.4em 1em; border-left: 6px solid #ff7f0e; background: #fff8ee; }
p.note { color: #555; }
"""


#: The plotly template of every figure pagesim draws (report, compare, sweep, capacity).
TEMPLATE = "plotly_white"


def plotly_script_src(
    page_path: str | Path, plotly_js: str | None = None, *, share: bool = False
) -> str:
    """Make plotly.js available to the page at ``page_path`` and return the ``src`` that
    loads it. ``plotly_js`` None: ``plotly.min.js`` beside the page (with ``share``, a
    run folder's: a hard link to one copy in the folder of runs, :func:`_write_plotly_js`).
    A URL (``://``) is returned as is. Otherwise a file path (or a folder, for
    ``plotly.min.js`` in it), relative to the working directory, referenced relative to
    the page. The file is written only when it is missing or differs from the installed
    plotly's."""
    if plotly_js and "://" in plotly_js:
        return plotly_js
    page_dir = Path(page_path).parent
    target = Path(plotly_js) if plotly_js else page_dir / PLOTLY_JS
    if target.is_dir():
        target = target / PLOTLY_JS
    _write_plotly_js(target, share=share and not plotly_js)
    return Path(os.path.relpath(target.resolve(), page_dir.resolve())).as_posix()


def _write_plotly_js(target: Path, *, share: bool = False) -> None:
    """``target`` holds the installed plotly.js. With ``share`` (a run folder's page) and
    where the file system allows, it is a hard link to one copy in the folder above
    (``.plotly-VERSION.min.js``), so a hundred run folders in ``runs/`` store 4.8 MB once
    and each still opens offline, copied anywhere; else a copy of its own."""
    import plotly
    from plotly.offline import get_plotlyjs

    text = get_plotlyjs().encode("utf-8")
    if _holds(target, text):
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    shared = target.parent.resolve().parent / f".plotly-{plotly.__version__}.min.js"
    try:
        if not share:
            raise OSError("not shared")
        if not _holds(shared, text):
            _write_whole(shared, text)
        os.link(shared, partial)
    except OSError:  # not a run folder, no hard links here, or the folder above is read-only
        partial.unlink(missing_ok=True)
        partial.write_bytes(text)
    partial.replace(target)  # readers never see half a file


def _holds(path: Path, text: bytes) -> bool:
    return path.is_file() and path.stat().st_size == len(text) and path.read_bytes() == text


def _write_whole(path: Path, text: bytes) -> None:
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    partial.write_bytes(text)
    partial.replace(path)


def page(title: str, body: str, script_src: str, *, style: str = "") -> str:
    """A whole HTML page: ``body`` is trusted HTML (callers escape what they insert);
    ``title`` is escaped here."""
    escaped = html.escape(title)
    return (
        '<!DOCTYPE html>\n<html>\n<head>\n<meta charset="utf-8">\n'
        f"<title>{escaped}</title>\n<style>{_STYLE}{style}</style>\n"
        f'<script src="{html.escape(script_src)}"></script>\n</head>\n<body>\n'
        f"<h1>{escaped}</h1>\n{body}\n</body>\n</html>\n"
    )


def figure_div(fig: go.Figure, div_id: str) -> str:
    """One figure as a ``<section>`` holding its div and the script that draws it
    (plotly.js itself comes from the page's head)."""
    div = pio.to_html(
        fig,
        include_plotlyjs=False,
        full_html=False,
        div_id=div_id,
        config={"displaylogo": False, "responsive": True},
    )
    return f'<section class="figure">\n{div}\n</section>'


def html_table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    css_class: str = "",
    numeric: Container[int] | None = None,
) -> str:
    """An HTML table of text cells (escaped here). Columns in ``numeric`` (default:
    every column but the first) are right-aligned."""

    def is_numeric(j: int) -> bool:
        return j > 0 if numeric is None else j in numeric

    def cells(row, tag):
        return "".join(
            f"<{tag}{' class=num' if is_numeric(j) else ''}>{html.escape(str(c))}</{tag}>"
            for j, c in enumerate(row)
        )

    css = f' class="{css_class}"' if css_class else ""
    head = f"<thead><tr>{cells(header, 'th')}</tr></thead>\n" if header else ""
    body = "\n".join(f"<tr>{cells(row, 'td')}</tr>" for row in rows)
    return f"<table{css}>\n{head}<tbody>\n{body}\n</tbody>\n</table>"


def downsample_indices(num_points: int, max_points: int = MAX_POINTS) -> np.ndarray:
    """Evenly spaced indices into a series of `num_points`, at most `max_points` of them,
    always keeping the first and the last point. Deterministic (no sampling)."""
    if num_points <= max_points:
        return np.arange(num_points)
    return np.unique(np.linspace(0, num_points - 1, max_points).round().astype(np.int64))


def mark_empty(fig: go.Figure, text: str, **where) -> None:
    """Say ``text`` (e.g. "none: no request was preempted") where a series would be, and
    hide the axes instead of drawing a flat line on plotly's default -1..1 axes.
    ``where``: ``row`` and ``col`` of a subplot (only its y axis is hidden: its x axis
    may be shared with the other rows); the whole figure without them."""
    if where:
        subplot = fig.get_subplot(where["row"], where["col"])
        x, y = sum(subplot.xaxis.domain) / 2, sum(subplot.yaxis.domain) / 2
    else:
        x, y = 0.5, 0.5
        fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False, **where)
    fig.add_annotation(text=text, showarrow=False, xref="paper", yref="paper", x=x, y=y)


def shade_warmup(fig: go.Figure, start_s: float | None, end_s: float | None, **where) -> None:
    """Shade the warm-up (from the first arrival to the start of the steady window) on
    a time axis; nothing when there is none."""
    if start_s is None or end_s is None or not end_s > start_s:
        return
    fig.add_vrect(
        x0=start_s,
        x1=end_s,
        fillcolor="#bbbbbb",
        opacity=0.25,
        line_width=0,
        layer="below",
        annotation_text="warm-up",
        annotation_position="top left",
        **where,
    )


def latency_cdf_grid() -> go.Figure:
    """One row of three subplots, one per LATENCY_COLUMNS, titled in ms."""
    titles = [f"{label} (ms)" for label, _ in LATENCY_COLUMNS]
    return make_subplots(rows=1, cols=3, subplot_titles=titles)


def cdf_ms(seconds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The known (not NaN) values of ``seconds`` sorted and in ms, and the fraction of
    them at or below each: one empirical CDF."""
    values = np.sort(seconds[~np.isnan(seconds)]) * 1000.0
    return values, (np.arange(values.size) + 1) / values.size


def finish_cdf_panel(fig: go.Figure, col: int, drawn: bool, empty: str, *, top: float) -> None:
    """The axes of CDF panel ``col`` (x in ms, y 0..``top``) if a series was ``drawn`` in
    it, else ``empty`` said where it would be (mark_empty)."""
    if drawn:
        fig.update_xaxes(title_text="ms", row=1, col=col)
        fig.update_yaxes(range=[0, top], row=1, col=col)
    else:
        mark_empty(fig, empty, row=1, col=col)
