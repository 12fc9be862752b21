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


def _scaled(value, factor: float):
    return None if value is None else value * factor


#: A metric row: its label (with the unit of its value), its value (a number in that
#: unit, a text or None) and the text a table shows.
MetricRow = tuple[str, Any, str]


def metric_rows(
    summary: Mapping[str, Any], offload: Sequence[str] | None = None, pools: bool | None = None
) -> list[MetricRow]:
    """Headline metrics in display order, each as (label, value, text); missing keys give
    None and '-'. Each offload tier named in ``offload`` has its rows (default: the tiers
    the run had); ``pools`` adds the prefill and decode pools' rows (default: whether the
    run had them). Values are in the label's unit: ms for 'ms' rows, percent for '%'
    rows (summary.json keeps seconds and fractions). KV figures are in token slots and %
    of one replica's pool, so paged runs (blocks of 16 slots) and contiguous baselines
    (1-slot blocks) compare directly."""
    s, kv = summary, _kv_block(summary)
    window = s.get("steady_state") or {}

    def num(label, value, digits=2):
        return (label, value, _num(value, digits))

    def count(label, value):
        return (label, value, "-" if value is None else str(value))

    def pct(label, fraction):
        return (label, _scaled(fraction, 100.0), _pct(fraction))

    rows = [
        ("verdict", window.get("verdict"), window.get("verdict", "-")),
        ("limited by", window.get("limited_by"), limiter_text(window)),
        count("requests", s.get("num_requests")),
        count("finished", s.get("num_finished")),
        count("rejected", s.get("num_rejected")),
        num("steady throughput req/s", window.get("throughput_rps")),
        num("steady throughput tok/s", window.get("throughput_tok_s"), 1),
        num("whole-run throughput req/s", s.get("throughput_rps")),
        num("whole-run throughput tok/s", s.get("throughput_tok_s"), 1),
    ]
    # A run without a steady window shows its whole run's figures, marked so.
    whole = "" if _window_name(s) == "steady window" else " (whole run)"
    for label, key in _LATENCIES:
        dist = _latency(s, key)
        rows += [
            (f"{label} {p} ms", _scaled(dist.get(p), 1000.0), _ms(dist.get(p)) + whole)
            for p in ("p50", "p90", "p99")
        ]
    goodput = window.get("goodput", s.get("goodput"))
    goodput_rps = window.get("goodput_rps", s.get("goodput_rps"))
    rows += [
        # Two forms that can differ a lot: the share of the window's arrivals that met
        # the SLO, and the window's completions that met it, per second.
        ("goodput % of arrivals", _scaled(goodput, 100.0), _pct(goodput) + whole),
        ("goodput req/s completed", goodput_rps, _num(goodput_rps) + whole),
        num("mean batch", s.get("mean_batch_size"), 1),
        count("preemptions", s.get("num_preemptions")),
        pct("prefix hit rate %", s.get("prefix_hit_rate")),
        count("prefix blocks evicted", kv.get("evicted_blocks")),
    ]
    rows += [pct(f"KV {key.replace('_', ' ')} % of pool", kv.get(key)) for key in KV_SPLIT_KEYS]
    rows += [
        pct("KV peak used % of pool", kv.get("peak_used_fraction")),
        num("KV peak used slots", kv.get("peak_used_slots"), 0),
        num("KV pool slots per replica", s.get("total_slots"), 0),
    ]
    for name in offload_tiers(s) if offload is None else offload:
        rows += _offload_rows(s, name)
    if s.get("disaggregation") is not None if pools is None else pools:
        rows += _pool_rows(s.get("disaggregation") or {})
    if s.get("observed") is not None:  # a client's recording: the engine's side is unseen
        rows = [
            (label, value, NOT_OBSERVABLE if value is None and _engine_side(label) else text)
            for label, value, text in rows
        ]
    return rows


#: What a run observed from the client side (``pagesim observe``, an imported recording)
#: shows for a figure only the engine knows: unknown, never 0 or "none".
NOT_OBSERVABLE = "not observable"


def _engine_side(label: str) -> bool:
    """Whether the row ``label`` is a figure of the engine's steps or KV cache."""
    return label.startswith(("limited by", "mean batch", "preemptions", "prefix", "KV "))


def offload_tiers(summary: Mapping[str, Any]) -> list[str]:
    """The offload tiers a run had, nearest the GPU first (summary["kv_offload"])."""
    return [tier["tier"] for tier in (summary.get("kv_offload") or {}).get("tiers", [])]


def _offload_rows(summary: Mapping[str, Any], name: str) -> list[MetricRow]:
    """The ``name`` offload tier's figures (summary["kv_offload"], sim.run.runner); '-'
    where the run had no such tier."""
    tiers = (summary.get("kv_offload") or {}).get("tiers", [])
    tier = next((t for t in tiers if t["tier"] == name), {})

    def gib(key):
        value = tier.get(key)
        return None if value is None else value / 2**30

    served, evicted = tier.get("hit_tokens"), tier.get("evicted_blocks")
    return [
        (f"{name} tier prompt tokens served", served, "-" if served is None else f"{served:,}"),
        (f"{name} tier GiB loaded", gib("loaded_bytes"), _num(gib("loaded_bytes"), 1)),
        (f"{name} tier GiB stored", gib("stored_bytes"), _num(gib("stored_bytes"), 1)),
        (f"{name} tier blocks evicted", evicted, "-" if evicted is None else f"{evicted:,}"),
    ]


def _pool_rows(split: Mapping[str, Any]) -> list[MetricRow]:
    """Prefill and decode pools' figures (summary["disaggregation"], sim.run.pools); '-'
    for a run whose replicas served both phases."""

    def p90_ms(key: str) -> MetricRow:
        value = (split.get(key) or {}).get("p90")
        return (
            f"{key.removesuffix('_s').replace('_', ' ')} p90 ms",
            _scaled(value, 1000.0),
            _ms(value),
        )

    moved = split.get("bytes_moved")
    gib = None if moved is None else moved / 2**30
    instances = split.get("prefill_instances"), split.get("decode_instances")
    text = "-" if None in instances else f"{instances[0]} / {instances[1]}"
    busy = split.get("link_busy_fraction")
    return [
        ("prefill / decode instances", text if None not in instances else None, text),
        ("KV GiB read", gib, _num(gib, 1)),
        p90_ms("transfer_wait_s"),
        p90_ms("transfer_s"),
        ("link busy %", _scaled(busy, 100.0), _pct(busy)),
    ]


def summary_rows(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Headline metrics as (label, text) rows, in display order (:func:`metric_rows`);
    missing keys show '-'. Shared by the CLI tables and the HTML report."""
    return [(label, text) for label, _, text in metric_rows(summary)]


def _kv_block(summary: Mapping[str, Any]) -> dict[str, Any]:
    """summary["kv"], with the peak in slots derived from blocks for summaries written
    before it was recorded."""
    kv = dict(summary.get("kv") or {})
    if kv.get("peak_used_slots") is None and kv.get("peak_used_blocks") is not None:
        kv["peak_used_slots"] = kv["peak_used_blocks"] * summary.get("block_size", 1)
    return kv


def per_replica_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """summary["per_replica"] as a table (header, rows); no rows for one replica."""
    header = [
        "replica",
        "finished",
        "throughput req/s",
        "throughput tok/s",
        "mean batch",
        "preemptions",
        "prefix hit rate",
        "KV token states",
        "KV peak used",
    ]
    rows = []
    for entry in summary.get("per_replica") or []:
        kv = entry.get("kv") or {}
        rows.append(
            [
                str(entry.get("replica", "-")),
                str(entry.get("num_finished", "-")),
                _num(entry.get("throughput_rps")),
                _num(entry.get("throughput_tok_s"), 1),
                _num(entry.get("mean_batch_size"), 1),
                str(entry.get("num_preemptions", "-")),
                _pct(entry.get("prefix_hit_rate")),
                _pct(kv.get("token_states")),
                _pct(kv.get("peak_used_fraction")),
            ]
        )
    return header, rows


def _latency(summary: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """The headline distribution of ``key``: the steady window's, or (a run with no
    window) the whole run's; :func:`_window_name` says which."""
    window = summary.get("steady_state") or {}
    return window.get(key) or summary.get(key) or {}


def _window_name(summary: Mapping[str, Any]) -> str:
    """Which requests the headline latencies and goodput cover: "steady window" (those
    arriving in it), or "whole run" for a run too short to have one."""
    return "steady window" if (summary.get("steady_state") or {}).get("ttft_s") else "whole run"


def limiter_text(window: Mapping[str, Any], *, explain: bool = False) -> str:
    """The dominant limiter and its share of the window's steps, e.g. 'max_num_seqs (87% of
    steps)'; 'none' as 'no limit', with what that means where ``explain``."""
    name = window.get("limited_by")
    if name is None:
        return "-"
    share = _pct((window.get("limiters") or {}).get(name))
    if name != "none":
        return f"{name} ({share} of steps)"
    if explain:
        return f"no limit ({share} of steps below max_num_seqs, the token budget and the KV pool)"
    return f"no limit ({share} of steps)"


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
    latency = [[f"latency (ms, {_window_name(summary)})", *_PERCENTILES]]
    for label, key in _LATENCIES:
        dist = _latency(summary, key)
        latency.append([label, *(_ms(dist.get(p)) for p in _PERCENTILES)])
    kv_split = "  ".join(
        f"{k.replace('_', ' ')} {rows['KV ' + k.replace('_', ' ') + ' % of pool']}"
        for k in KV_SPLIT_KEYS
    )
    bottom = [
        [
            "goodput",
            f"{rows['goodput % of arrivals']} of arrivals met the SLO  "
            f"({rows['goodput req/s completed']} req/s completed within it)",
        ],
        ["mean batch", rows["mean batch"]],
        ["preemptions", rows["preemptions"]],
        ["prefix hit rate", rows["prefix hit rate %"]],
        *(
            [
                f"{name} tier",
                f"{rows[name + ' tier prompt tokens served']} prompt tokens served  "
                f"({rows[name + ' tier GiB loaded']} GiB loaded, "
                f"{rows[name + ' tier GiB stored']} GiB stored, "
                f"{rows[name + ' tier blocks evicted']} blocks evicted)",
            ]
            for name in offload_tiers(summary)
        ),
        *_disaggregation_rows(summary.get("disaggregation")),
        ["KV split (time avg, % of pool)", kv_split],
        [
            "KV peak used",
            f"{rows['KV peak used % of pool']} of the pool  ({rows['KV peak used slots']} of "
            f"{rows['KV pool slots per replica']} token slots)",
        ],
    ]
    profile_note = _profile_note(summary.get("cost_model") or {})
    if profile_note:
        bottom.append(["cost model", profile_note])
    text_blocks = [_align_left(top), _align(latency), _align_left(bottom)]
    return "\n\n".join(text_blocks)


def _disaggregation_rows(split: Mapping[str, Any] | None) -> list[list[str]]:
    """Prefill and decode pools: what crossed the link, and how long the reads waited
    for the decode pool's blocks and took (none for a colocated run)."""
    if not split:
        return []

    def ms(key: str) -> str:
        dist = split.get(key) or {}
        return f"p50 {_ms(dist.get('p50'))} ms, p90 {_ms(dist.get('p90'))} ms"

    gib = split["bytes_moved"] / 2**30
    return [
        [
            "prefill / decode",
            f"{split['prefill_instances']} / {split['decode_instances']} instances, "
            f"{split['hand_offs']:,} prompts handed off, {gib:,.1f} GiB read, "
            f"link busy {_pct(split.get('link_busy_fraction'))}",
        ],
        ["KV read wait", ms("transfer_wait_s")],
        ["KV read", ms("transfer_s")],
    ]


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
    return limiter_text(window, explain=True) + (f"; {others}" if others else "")


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


#: The label of compare's row under the prefix hit rate (sim.output.yardstick).
BELADY_LABEL = "prefix hit rate % of belady's"


def compare_rows(
    summaries: Mapping[str, Mapping[str, Any]],
    belady: Mapping[str, float | None] | None = None,
) -> list[tuple[str, list[Any], list[str]]]:
    """Headline metrics of several runs: (label, values, texts) per metric, one value and
    text per run in the mapping's order (:func:`metric_rows`), and, given ``belady``
    (sim.output.yardstick), each run's prefix hit rate as a percentage of the offline
    optimum's, under the hit rate. Raises ValueError when `summaries` is empty."""
    if not summaries:
        raise ValueError("compare needs at least one summary")
    names = [name for summary in summaries.values() for name in offload_tiers(summary)]
    offload = sorted(set(names), key=names.index)  # every run shows every tier's rows
    pools = any(summary.get("disaggregation") is not None for summary in summaries.values())
    per_run = [metric_rows(summary, offload, pools) for summary in summaries.values()]
    rows = []
    for i, (label, _, _) in enumerate(per_run[0]):
        rows.append((label, [run[i][1] for run in per_run], [run[i][2] for run in per_run]))
        if label == "prefix hit rate %" and belady is not None:
            fractions = [belady.get(name) for name in summaries]
            values = [_scaled(f, 100.0) for f in fractions]
            rows.append((BELADY_LABEL, values, [_pct(f) for f in fractions]))
    return rows


def align_table(rows: Sequence[Sequence[str]]) -> str:
    """Text rows as an aligned table: the first column left, the others right."""
    return _align(rows)


def compare_table(
    summaries: Mapping[str, Mapping[str, Any]],
    belady: Mapping[str, float | None] | None = None,
) -> str:
    """Headline metrics side by side, one column per run (:func:`compare_rows`), as an
    aligned text table. Raises ValueError when `summaries` is empty."""
    rows = [["metric", *summaries]]
    rows += [[label, *texts] for label, _, texts in compare_rows(summaries, belady)]
    return _align(rows)
