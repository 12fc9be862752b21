"""The text tables a user reads: the summary printed by ``pagesim run`` and the side by
side of ``pagesim compare`` (the HTML report shares :func:`summary_rows`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sim.output.steplog import KV_SPLIT_KEYS

_LATENCIES = (("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("E2E", "e2e_s"))


_PERCENTILES = ("mean", "p50", "p90", "p99")


def _num(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _ms(value) -> str:
    return "-" if value is None else f"{value * 1000:,.1f}"


def _pct(value) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def summary_rows(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Headline metrics as (label, text) rows, in display order; missing keys show '-'.
    Shared by the CLI tables and the HTML report."""
    s, kv = summary, summary.get("kv") or {}
    window = s.get("steady_state") or {}
    rows = [
        ("verdict", window.get("verdict", "-")),
        ("limited by", _limiter_text(window)),
        ("requests", str(s.get("num_requests", "-"))),
        ("finished", str(s.get("num_finished", "-"))),
        ("rejected", str(s.get("num_rejected", "-"))),
        ("steady throughput req/s", _num(window.get("throughput_rps"))),
        ("steady throughput tok/s", _num(window.get("throughput_tok_s"), 1)),
        ("whole-run throughput req/s", _num(s.get("throughput_rps"))),
        ("whole-run throughput tok/s", _num(s.get("throughput_tok_s"), 1)),
    ]
    for label, key in _LATENCIES:
        dist = _latency(s, key)
        rows += [(f"{label} {p} ms", _ms(dist.get(p))) for p in ("p50", "p90", "p99")]
    rows += [
        ("goodput", _pct(window.get("goodput", s.get("goodput")))),
        ("goodput req/s", _num(window.get("goodput_rps", s.get("goodput_rps")))),
        ("mean batch", _num(s.get("mean_batch_size"), 1)),
        ("preemptions", str(s.get("num_preemptions", "-"))),
        ("prefix hit rate", _pct(s.get("prefix_hit_rate"))),
    ]
    rows += [(f"KV {key.replace('_', ' ')}", _pct(kv.get(key))) for key in KV_SPLIT_KEYS]
    rows.append(("KV peak used", _pct(kv.get("peak_used_fraction"))))
    rows.append(("KV peak blocks", str(kv.get("peak_used_blocks", "-"))))
    return rows


def _latency(summary: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """The headline distribution of ``key``: the steady window's, or (a run with no
    window) the whole run's."""
    window = summary.get("steady_state") or {}
    return window.get(key) or summary.get(key) or {}


def _limiter_text(window: Mapping[str, Any]) -> str:
    """The dominant limiter and its share of the window's steps, e.g. 'max_num_seqs (87%)'."""
    name = window.get("limited_by")
    if name is None:
        return "-"
    return f"{name} ({_pct((window.get('limiters') or {}).get(name))} of steps)"


def _align(rows: Sequence[Sequence[str]]) -> str:
    """Left-align the first column, right-align the others, two spaces between."""
    widths = [max(len(row[j]) for row in rows) for j in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def format_summary_table(summary: Mapping[str, Any]) -> str:
    """The table printed at the end of `pagesim run`: counts and throughput, a latency
    block (mean / p50 / p90 / p99 in ms), then goodput, batching, cache and KV split."""
    rows = dict(summary_rows(summary))
    reasons = summary.get("rejected_reasons") or {}
    rejected = rows["rejected"]
    if reasons:
        rejected += " (" + ", ".join(f"{k}: {v}" for k, v in sorted(reasons.items())) + ")"
    window = summary.get("steady_state") or {}
    top = [
        ["verdict", f"{window.get('verdict', '-')}: {window.get('reason', '')}".rstrip(": ")],
        ["limited by", _limiter_breakdown(window)],
        ["steady window", _window_text(window)],
        ["requests finished / total", f"{rows['finished']} / {rows['requests']}"],
        ["requests rejected", rejected],
        [
            "throughput (steady)",
            f"{rows['steady throughput req/s']} req/s  {rows['steady throughput tok/s']} tok/s",
        ],
        [
            "throughput (whole run)",
            f"{rows['whole-run throughput req/s']} req/s  "
            f"{rows['whole-run throughput tok/s']} tok/s",
        ],
    ]
    latency = [["latency (ms)", *_PERCENTILES]]
    for label, key in _LATENCIES:
        dist = _latency(summary, key)
        latency.append([label, *(_ms(dist.get(p)) for p in _PERCENTILES)])
    kv_split = "  ".join(
        f"{k.replace('_', ' ')} {rows['KV ' + k.replace('_', ' ')]}" for k in KV_SPLIT_KEYS
    )
    bottom = [
        ["goodput", f"{rows['goodput']}  ({rows['goodput req/s']} req/s)"],
        ["mean batch", rows["mean batch"]],
        ["preemptions", rows["preemptions"]],
        ["prefix hit rate", rows["prefix hit rate"]],
        ["KV split (time avg)", kv_split],
        ["KV peak used", f"{rows['KV peak used']}  ({rows['KV peak blocks']} blocks)"],
    ]
    profile_note = _profile_note(summary.get("cost_model") or {})
    if profile_note:
        bottom.append(["cost model", profile_note])
    text_blocks = [_align_left(top), _align(latency), _align_left(bottom)]
    return "\n\n".join(text_blocks)


def _profile_note(cost_model: Mapping[str, Any]) -> str:
    """For a profile-driven run: how many steps needed the analytic model somewhere."""
    if cost_model.get("kind") != "profile":
        return ""
    fallbacks = {k: v for k, v in (cost_model.get("fallback_steps") or {}).items() if v}
    steps = cost_model.get("steps", 0)
    if not fallbacks:
        return f"profile: all {steps:,} steps inside the profile's grid"
    parts = ", ".join(f"{part} {count:,}" for part, count in sorted(fallbacks.items()))
    return (
        f"profile: steps with a part outside the profile, predicted analytically: {parts} "
        f"(of {steps:,} steps)"
    )


def _limiter_breakdown(window: Mapping[str, Any]) -> str:
    """'max_num_seqs (87% of steps; none 8%, token_budget 5%, ...)'."""
    shares = window.get("limiters") or {}
    main = window.get("limited_by")
    if main is None:
        return "-"
    others = ", ".join(
        f"{name} {_pct(share)}"
        for name, share in sorted(shares.items(), key=lambda item: -(item[1] or 0))
        if name != main and share
    )
    return _limiter_text(window) + (f"; {others}" if others else "")


def _window_text(window: Mapping[str, Any]) -> str:
    if window.get("window_s") is None:
        return "-"
    return (
        f"{window['window_start_s']:.1f}-{window['window_end_s']:.1f} s "
        f"({window['window_s']:.1f} s, {window['arrivals']:,} arrivals at "
        f"{window['arrival_rate_rps']:.2f} req/s, {window['completions']:,} completions)"
    )


def _align_left(rows: Sequence[Sequence[str]]) -> str:
    width = max(len(row[0]) for row in rows)
    return "\n".join(f"{label.ljust(width)}  {value}" for label, value in rows)


def compare_table(
    summaries: Mapping[str, Mapping[str, Any]],
    belady: Mapping[str, float | None] | None = None,
) -> str:
    """Headline metrics side by side, one column per run (in the mapping's order), and,
    given ``belady`` (sim.output.yardstick), each run's prefix hit rate as a fraction of
    the offline optimum's, under the hit rate. Raises ValueError when `summaries` is
    empty."""
    if not summaries:
        raise ValueError("compare_table needs at least one summary")
    columns = {name: dict(summary_rows(s)) for name, s in summaries.items()}
    labels = [label for label, _ in summary_rows(next(iter(summaries.values())))]
    rows = [["metric", *columns]]
    for label in labels:
        rows.append([label, *(col[label] for col in columns.values())])
        if label == "prefix hit rate" and belady is not None:
            rows.append(["  of belady's", *(_pct(belady.get(name)) for name in columns)])
    return _align(rows)
