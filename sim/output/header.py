"""What a run was, in one glance: the facts at the top of its report (model, GPU, tensor
parallelism, replicas, policies, traffic, seed) read from its scenario.json, and the
overrides it was run with, read from the command in its metadata.json.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["overrides", "run_facts"]

#: Command-line options that change what a run computes.
_OVERRIDE_OPTIONS = ("--set", "--seed")


def overrides(command: Sequence[str]) -> list[str]:
    """The ``--set key=value`` and ``--seed N`` options of a pagesim command line, in
    order, each as one string (``--set=k=v`` and ``--seed=N`` forms included)."""
    found = []
    args = list(command)
    for i, arg in enumerate(args):
        if arg in _OVERRIDE_OPTIONS and i + 1 < len(args):
            found.append(f"{arg} {args[i + 1]}")
        elif arg.startswith(tuple(f"{option}=" for option in _OVERRIDE_OPTIONS)):
            option, _, value = arg.partition("=")
            found.append(f"{option} {value}")
    return found


def _get(scenario: Mapping[str, Any], path: str, default: Any = None) -> Any:
    value: Any = scenario
    for key in path.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return default
        value = value[key]
    return value


def _name(section: Any) -> str:
    if isinstance(section, Mapping):
        return str(section.get("name", "custom"))
    return "-" if section is None else str(section)


def _traffic(scenario: Mapping[str, Any]) -> str:
    arrival = _get(scenario, "workload.arrival", {}) or {}
    kind = arrival.get("kind", "-")
    if kind == "trace":
        scale = arrival.get("time_scale", 1.0)
        speed = f", time x{scale:g}" if scale != 1.0 else ""
        return f"trace {arrival.get('format', '')} {arrival.get('path', '')}{speed}".strip()
    unit = "sessions/s" if _get(scenario, "workload.sessions") else "req/s"
    stages = arrival.get("stages")
    if kind == "stages" and isinstance(stages, list):
        steps = ", then ".join(
            f"{stage.get('rate_rps', 0):g} {unit} for {stage.get('duration_s', 0):g} s"
            for stage in stages[:6]
        )
        more = f", ... ({len(stages)} stages)" if len(stages) > 6 else ""
        return f"{arrival.get('process', 'poisson')} in stages: {steps}{more}"
    rate = arrival.get("rate_rps")
    text = f"{kind} {rate:g} {unit}" if isinstance(rate, int | float) else str(kind)
    if arrival.get("cv") is not None and kind == "gamma":
        text += f" (cv {arrival['cv']:g})"
    return text


def _length(scenario: Mapping[str, Any]) -> str:
    requests = _get(scenario, "simulation.num_requests")
    duration = _get(scenario, "simulation.duration_s")
    warmup = _get(scenario, "simulation.warmup_requests", 0)
    if requests:
        text = f"{requests:,} requests"
    elif duration:
        text = f"{duration:g} s of arrivals"
    else:
        text = "the whole trace"
    return text + (f", the first {warmup:,} as warm-up" if warmup else "")


def run_facts(
    scenario: Mapping[str, Any],
    command: Sequence[str] | None = None,
    summary: Mapping[str, Any] | None = None,
) -> list[tuple[str, str]]:
    """(label, text) rows describing a run, from its scenario.json content and (if
    known) its command line; a field the scenario lacks shows '-'. For a run a client
    recorded (``summary`` with an ``observed`` block) the rows say where its times came
    from instead of a cost model, and that a live server's hardware is unknown (an
    imported recording, with a ``recorded`` block, names its own)."""
    g = _get
    prefix = g(scenario, "cache.prefix_caching")
    eviction = f"{g(scenario, 'eviction.policy', '-')}" if prefix else "off"
    rows = [
        ("model", _name(g(scenario, "model"))),
        ("GPU", _name(g(scenario, "hardware"))),
        ("tensor parallel", str(g(scenario, "tensor_parallel", "-"))),
        _replicas_row(scenario),
        (
            "scheduler",
            f"{g(scenario, 'scheduler.policy', '-')}, "
            f"{g(scenario, 'scheduler.batching', '-')} batching, "
            f"max {g(scenario, 'scheduler.max_num_seqs', '-')} seqs, "
            f"{g(scenario, 'scheduler.max_num_batched_tokens', '-')} tokens",
        ),
        (
            "preemption",
            f"{g(scenario, 'preemption.mode', '-')} "
            f"(victim {g(scenario, 'preemption.victim', '-')})",
        ),
        (
            "KV cache",
            f"{g(scenario, 'cache.allocator', '-')}, blocks of "
            f"{g(scenario, 'cache.block_size', '-')} tokens, prefix caching "
            f"{'on, eviction ' + eviction if prefix else 'off'}",
        ),
        ("arrivals", _traffic(scenario)),
        ("length", _length(scenario)),
        (
            "cost model",
            f"{g(scenario, 'cost_model.kind', '-')} (backend {g(scenario, 'backend.kind', '-')})",
        ),
        ("seed", str(g(scenario, "simulation.seed", "-"))),
    ]
    observed = (summary or {}).get("observed")
    if observed is not None:
        live = (summary or {}).get("recorded") is None
        rows = [_observed_fact(label, text, observed, live) for label, text in rows]
    if command is not None:
        rows.append(("overrides", " ".join(overrides(command)) or "none"))
    return rows


def _observed_fact(
    label: str, text: str, observed: Mapping[str, Any], live: bool
) -> tuple[str, str]:
    """A fact of a recorded run: no cost model made its times; a ``live`` server's GPU
    is whatever serves it."""
    source = str(observed.get("endpoint", "-"))
    if label == "cost model":
        return label, f"none: times measured ({source})"
    if label == "GPU" and live:
        return label, f"not observable (the server at {source}; the scenario says {text})"
    return label, text


def _replicas_row(scenario: Mapping[str, Any]) -> tuple[str, str]:
    """The replicas and their router, or the prefill and decode pools and their link."""
    g = _get
    split = g(scenario, "routing.disaggregation")
    if not isinstance(split, Mapping):
        router = g(scenario, "routing.router", "-")
        return "replicas", f"{g(scenario, 'routing.replicas', '-')} (router {router})"
    pools = []
    for role in ("prefill", "decode"):
        router = g(split, f"{role}.router", "round-robin")
        pools.append(f"{g(split, f'{role}.replicas', 1)} {role} (router {router})")
    link = f"link {g(split, 'link', '-')}, decider {g(split, 'decider', '-')}"
    return "pools", f"{' + '.join(pools)}; {link}"
