"""The one-page HTML report of a run (report.html).

Top: what the run was (model, GPU, tensor parallelism, replicas, policies, traffic,
seed and the command line's overrides), the stability verdict, the summary table and,
for several replicas, a table per replica. Then the figures of
sim.output.report_figures: latency CDFs with percentile markers, throughput over time,
TTFT and queueing delay against arrival time, the KV pool split (a selector for the
replica), the prefix cache, swap traffic and CPU pool use, batch size and queue length
(a panel per replica) and preemptions, with the warm-up shaded.

plotly.js is not in the page: it is written once as plotly.min.js beside it and loaded
by a relative path (sim.output.page), so the folder works offline.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sim.engine.records import RequestOutcome
from sim.output.header import run_facts
from sim.output.page import (
    MAX_POINTS,
    downsample_indices,
    figure_div,
    html_table,
    page,
    plotly_script_src,
)
from sim.output.report_figures import (
    FIGURE_TITLES,
    RunData,
    arrival_figure,
    empty_figure,
    latency_figure,
    preemption_figure,
    throughput_figure,
)
from sim.output.report_memory import cache_figure, kv_figure, load_figure, swap_figure
from sim.output.requests import request_table
from sim.output.steplog import StepLog
from sim.output.tables import limiter_text, per_replica_rows, summary_rows

__all__ = ["FIGURES", "FIGURE_TITLES", "MAX_POINTS", "downsample_indices", "write_report"]

#: The figures of the page, by div id, in page order (titles: FIGURE_TITLES).
FIGURES = {
    "latency": latency_figure,
    "throughput": throughput_figure,
    "arrival": arrival_figure,
    "kv": kv_figure,
    "cache": cache_figure,
    "swap": swap_figure,
    "load": load_figure,
    "preemptions": preemption_figure,
}


def write_report(
    out_dir: str | Path,
    outcomes: Iterable[RequestOutcome],
    steps: StepLog,
    summary: Mapping[str, Any],
    title: str,
    *,
    scenario: Mapping[str, Any] | None = None,
    command: Sequence[str] | None = None,
    cpu_blocks: int | None = None,
    plotly_js: str | None = None,
) -> Path:
    """Write `out_dir`/report.html (directory created if missing, file overwritten) and
    plotly.min.js beside it (or make ``plotly_js``, a path or URL, available: see
    sim.output.page.plotly_script_src); return the page's path.

    ``scenario`` (scenario.json's content) and ``command`` (metadata.json's) give the
    header; ``cpu_blocks`` (one replica's CPU pool) scales the swap figure. Reads its
    inputs only; any run, even one with no finished request or no step, gives a valid
    page (empty figures say "no data" or "none")."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.html"
    data = RunData(request_table(outcomes), steps.columns(), summary, cpu_blocks)
    figures = [figure_div(_figure(data, name, make), name) for name, make in FIGURES.items()]
    facts = _facts_html(scenario, command, summary)
    top = f'<div class="top">\n{facts}{_summary_html(summary)}</div>\n'
    head = _verdict_html(summary) + _warnings_html(summary) + top
    body = head + _per_replica_html(summary) + "\n".join(figures)
    source = plotly_script_src(path, plotly_js, share=True)  # a run folder's report
    path.write_text(page(title, body, source), encoding="utf-8")
    return path


#: Figures of the engine's steps and KV cache, which a client's recording cannot show.
ENGINE_FIGURES = ("kv", "cache", "swap", "load", "preemptions")


def _figure(data: RunData, name: str, make):
    if data.observed and name in ENGINE_FIGURES:
        return empty_figure(
            name, "not observable: a client sees its requests, not the engine's steps"
        )
    return make(data)


def _facts_html(
    scenario: Mapping[str, Any] | None,
    command: Sequence[str] | None,
    summary: Mapping[str, Any],
) -> str:
    if scenario is None:
        return ""
    facts = run_facts(scenario, command, summary)
    facts = html_table([], facts, css_class="facts", numeric=())
    return facts + "\n"


def _verdict_html(summary: Mapping[str, Any]) -> str:
    """The stability verdict as a banner above the summary table."""
    window = summary.get("steady_state") or {}
    verdict = window.get("verdict")
    if verdict is None:
        return ""
    css = verdict.replace(" ", "-")
    limited = window.get("limited_by")
    limiter = f" Limited by {html.escape(limiter_text(window, explain=True))}." if limited else ""
    return (
        f'<p class="verdict {css}"><strong>{html.escape(verdict)}</strong>: '
        f"{html.escape(window.get('reason', ''))}.{limiter}</p>\n"
    )


def _warnings_html(summary: Mapping[str, Any]) -> str:
    """The summary's warnings (settings the run shows could not matter), one line each."""
    return "".join(
        f'<p class="warning">warning: {html.escape(str(text))}</p>\n'
        for text in summary.get("warnings") or ()
    )


def _summary_html(summary: Mapping[str, Any]) -> str:
    rows = summary_rows(summary)
    reasons = summary.get("rejected_reasons") or {}
    rows += [(f"rejected: {reason}", str(count)) for reason, count in sorted(reasons.items())]
    return html_table([], rows, css_class="summary") + "\n"


def _per_replica_html(summary: Mapping[str, Any]) -> str:
    header, rows = per_replica_rows(summary)
    if not rows:
        return ""
    return "<h2>Per replica</h2>\n" + html_table(header, rows, css_class="replicas") + "\n"
