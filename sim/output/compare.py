"""What ``pagesim compare`` prints: each run labelled by the shortest part of its path
that no other run shares, the headline metrics side by side (sim.output.tables), the
scenario fields that differ between the runs, in one of four formats.

Formats: ``table`` (aligned text), ``markdown`` (two GitHub tables), ``csv`` (one
rectangle: a row per metric, then a ``scenario.<field>`` row per differing field) and
``json`` (``runs``: label -> path, ``metrics``: label -> run -> value, ``scenario``:
field -> run -> value). csv and json carry numbers in each label's unit (ms, %, slots),
not the rounded text of the tables.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sim.output.steplog import KV_SPLIT_KEYS
from sim.output.tables import align_table, compare_rows

__all__ = [
    "FORMATS",
    "MISSING",
    "differing_fields",
    "field_text",
    "flatten",
    "format_compare",
    "run_labels",
    "scenario_problem",
    "summary_problem",
]

FORMATS = ("table", "csv", "json", "markdown")


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: A field a run's scenario lacks (or a run without scenario.json), in differing_fields.
MISSING = _Missing()

_MISSING_TEXT = "-"

#: Widest scenario value in the text table.
_CELL_WIDTH = 40


def run_labels(paths: Sequence[str | os.PathLike]) -> list[str]:
    """One label per run: the shortest trailing part of its absolute path that no other
    run's path ends with (``a/measured`` and ``b/measured`` keep their parent folder,
    ``runs/x`` is ``x``). The same path given twice is numbered: ``x``, ``x (2)``."""
    parts = [Path(os.path.abspath(p)).parts for p in paths]
    labels = []
    for i, mine in enumerate(parts):
        others = [theirs for j, theirs in enumerate(parts) if j != i and theirs != mine]
        k = 1
        while k < len(mine) and any(theirs[-k:] == mine[-k:] for theirs in others):
            k += 1
        labels.append(Path(*mine[-k:]).as_posix())
    seen: Counter[str] = Counter()
    for i, label in enumerate(labels):
        seen[label] += 1
        if seen[label] > 1:
            labels[i] = f"{label} ({seen[label]})"
    return labels


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level of dotted keys (``{"a": {"b": 1}}`` -> ``{"a.b": 1}``);
    lists and scalars are leaves. An empty mapping is a leaf too."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def differing_fields(
    scenarios: Mapping[str, Mapping[str, Any] | None],
) -> dict[str, dict[str, Any]]:
    """The scenario fields (dotted keys, sorted) whose values are not the same in every
    run, each with every run's value (:data:`MISSING` where a run's scenario lacks the
    field or the run has no scenario). Empty with fewer than two scenarios."""
    known = {label: flatten(s) for label, s in scenarios.items() if s is not None}
    if len(known) < 2:
        return {}
    keys = sorted(set().union(*known.values()))
    result = {}
    for key in keys:
        texts = {field_text(flat.get(key, MISSING)) for flat in known.values()}
        if len(texts) > 1:
            result[key] = {
                label: (known[label].get(key, MISSING) if label in known else MISSING)
                for label in scenarios
            }
    return result


def field_text(value: Any) -> str:
    """A scenario value as a table shows it: strings bare, the rest as JSON."""
    if value is MISSING:
        return _MISSING_TEXT
    return value if isinstance(value, str) else json.dumps(value)


def _one_line(text: str) -> str:
    """A cell of a text or markdown table: runs of whitespace (a YAML description's
    line breaks) as one space."""
    return " ".join(text.split())


def format_compare(
    summaries: Mapping[str, Mapping[str, Any]],
    scenarios: Mapping[str, Mapping[str, Any] | None] | None = None,
    *,
    belady: Mapping[str, float | None] | None = None,
    paths: Mapping[str, str] | None = None,
    fmt: str = "table",
) -> str:
    """The compare output in ``fmt`` (one of :data:`FORMATS`): metrics of ``summaries``
    (label -> summary.json) and the fields of ``scenarios`` (label -> scenario.json or
    None) that differ. Raises ValueError for an unknown format or no summary."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    rows = compare_rows(summaries, belady)
    fields = differing_fields(scenarios or {})
    labels = list(summaries)
    if fmt == "json":
        return _json(labels, rows, fields, paths or {})
    if fmt == "csv":
        return _csv(labels, rows, fields)
    field_rows = [
        [key, *(_one_line(field_text(values.get(label, MISSING))) for label in labels)]
        for key, values in fields.items()
    ]
    metric_rows = [[label, *texts] for label, _, texts in rows]
    warned = run_warnings_lines(summaries)
    if fmt == "markdown":
        parts = [_markdown(["metric", *labels], metric_rows)]
        if field_rows:
            table = _markdown(["scenario field that differs", *labels], field_rows)
            parts.append(table)
        return "\n\n".join([*parts, *warned])
    parts = [align_table([["metric", *labels], *metric_rows])]
    if field_rows:
        short = [[key, *(_shorten(cell) for cell in cells)] for key, *cells in field_rows]
        parts.append(align_table([["scenario field that differs", *labels], *short]))
    return "\n\n".join([*parts, *warned])


def run_warnings_lines(summaries: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Each run's summary warnings (settings the run shows could not have mattered, so a
    difference in them is no finding), one ``warning (label): ...`` line each."""
    return [
        f"warning ({label}): {text}"
        for label, summary in summaries.items()
        for text in summary.get("warnings") or ()
        if isinstance(text, str)
    ]


def _shorten(text: str, width: int = _CELL_WIDTH) -> str:
    """A table cell cut to ``width`` characters (a description would widen a column past
    the screen); csv, json and markdown keep the whole text."""
    return text if len(text) <= width else text[: width - 3] + "..."


def _markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def line(cells):
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    rule = "| --- |" + " ---: |" * (len(header) - 1)
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


def _csv(labels: Sequence[str], rows, fields: Mapping[str, Mapping[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["metric", *labels])
    for label, values, _ in rows:
        writer.writerow([label, *("" if v is None else v for v in values)])
    for key, values in fields.items():
        cells = [values.get(label, MISSING) for label in labels]
        cells = ["" if v is MISSING else field_text(v) for v in cells]
        writer.writerow([f"scenario.{key}", *cells])
    return out.getvalue().rstrip("\n")


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # a scenario's .inf: JSON has no such number
    return None if value is MISSING else value


def _json(labels, rows, fields, paths: Mapping[str, str]) -> str:
    document = {
        "runs": {label: paths.get(label, label) for label in labels},
        "metrics": {label: dict(zip(labels, values)) for label, values, _ in rows},
        "scenario": {
            key: {label: _json_value(values.get(label, MISSING)) for label in labels}
            for key, values in fields.items()
        },
    }
    return json.dumps(document, indent=2, allow_nan=False)


# ---------------------------------------------------------------- what compare reads

#: summary.json's numbers compare shows (sim.output.tables.metric_rows, compare_page).
_SUMMARY_NUMBERS = (
    "num_requests",
    "num_finished",
    "num_rejected",
    "num_preemptions",
    "num_replicas",
    "throughput_rps",
    "throughput_tok_s",
    "goodput",
    "goodput_rps",
    "mean_batch_size",
    "prefix_hit_rate",
    "total_slots",
    "block_size",
)
_WINDOW_NUMBERS = ("throughput_rps", "throughput_tok_s", "goodput", "goodput_rps")
_LATENCIES = ("ttft_s", "tpot_s", "e2e_s")
_LATENCY_NUMBERS = ("mean", "p50", "p90", "p99")
_KV_NUMBERS = (
    *KV_SPLIT_KEYS,
    "peak_used_fraction",
    "peak_used_slots",
    "peak_used_blocks",
    "evicted_blocks",
)


def summary_problem(summary: Any) -> str:
    """What in a summary.json ``compare`` could not show ('' if nothing), as
    ``field.path: expected ...``: each field it reads must be absent, null or of its
    type (a number, not a bool; a text; an object)."""
    if not isinstance(summary, Mapping):
        return f"(top level): expected a JSON object, got {_json_kind(summary)}"
    window = summary.get("steady_state")
    checks = [
        _fields(
            summary,
            "",
            numbers=_SUMMARY_NUMBERS,
            mappings=("steady_state", "kv", "kv_offload", "disaggregation", *_LATENCIES),
        ),
        _offload_problem(summary.get("kv_offload")),
        _fields(
            summary.get("disaggregation"),
            "disaggregation.",
            numbers=_POOL_NUMBERS,
            mappings=_POOL_TIMES,
        ),
        *(
            _fields(
                (summary.get("disaggregation") or {}).get(k)
                if isinstance(summary.get("disaggregation"), Mapping)
                else None,
                f"disaggregation.{k}.",
                numbers=_LATENCY_NUMBERS,
            )
            for k in _POOL_TIMES
        ),
        _fields(summary.get("kv"), "kv.", numbers=_KV_NUMBERS),
        *(_fields(summary.get(k), f"{k}.", numbers=_LATENCY_NUMBERS) for k in _LATENCIES),
        _fields(
            window,
            "steady_state.",
            numbers=_WINDOW_NUMBERS,
            texts=("verdict", "limited_by"),
            mappings=("limiters", *_LATENCIES),
        ),
    ]
    if isinstance(window, Mapping):
        limiters = window.get("limiters")
        names = tuple(limiters) if isinstance(limiters, Mapping) else ()
        checks.append(_fields(limiters, "steady_state.limiters.", numbers=names))
        checks += [
            _fields(window.get(k), f"steady_state.{k}.", numbers=_LATENCY_NUMBERS)
            for k in _LATENCIES
        ]
    return next((problem for problem in checks if problem), "")


#: The prefill and decode pools' numbers and times compare shows (tables._pool_rows).
_POOL_NUMBERS = ("prefill_instances", "decode_instances", "bytes_moved", "link_busy_fraction")
_POOL_TIMES = ("transfer_wait_s", "transfer_s")

#: Each offload tier's numbers compare shows (sim.output.tables._offload_rows).
_TIER_NUMBERS = ("hit_tokens", "loaded_bytes", "stored_bytes", "evicted_blocks")


def _offload_problem(offload: Any) -> str:
    """What in summary.json's ``kv_offload`` compare could not show ('' if nothing): a
    list of tiers, each an object named by its ``tier`` text, with its numbers."""
    if not isinstance(offload, Mapping) or offload.get("tiers") is None:
        return ""
    tiers = offload["tiers"]
    if not isinstance(tiers, list):
        return f"kv_offload.tiers: expected a list, got {_shown(tiers)}"
    for number, tier in enumerate(tiers):
        where = f"kv_offload.tiers[{number}]"
        if not isinstance(tier, Mapping) or not _is_text(tier.get("tier")):
            return f"{where}: expected an object with a tier name, got {_shown(tier)}"
        problem = _fields(tier, f"{where}.", numbers=_TIER_NUMBERS)
        if problem:
            return problem
    return ""


def scenario_problem(scenario: Any) -> str:
    """What in a run's scenario.json ``compare`` could not read ('' if nothing): it must
    be an object, its ``cache`` and ``eviction`` objects too (the belady yardstick)."""
    if not isinstance(scenario, Mapping):
        return f"(top level): expected a JSON object, got {_json_kind(scenario)}"
    return _fields(scenario, "", mappings=("cache", "eviction"))


def _fields(node: Any, prefix: str, *, numbers=(), texts=(), mappings=()) -> str:
    if not isinstance(node, Mapping):
        return ""  # reported, if it matters, by the level above
    kinds = [
        (numbers, _is_number, "a number"),
        (texts, _is_text, "a text"),
        (mappings, _is_mapping, "a JSON object"),
    ]
    for keys, fits, expected in kinds:
        for key in keys:
            value = node.get(key)
            if value is not None and not fits(value):
                return f"{prefix}{key}: expected {expected}, got {_shown(value)}"
    return ""


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_text(value: Any) -> bool:
    return isinstance(value, str)


def _is_mapping(value: Any) -> bool:
    return isinstance(value, Mapping)


def _json_kind(value: Any) -> str:
    kinds = {dict: "an object", list: "a list", str: "a text", bool: "a boolean", int: "a number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def _shown(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, Mapping | list) else _json_kind(value)
    return text if len(text) <= 40 else text[:37] + "..."
