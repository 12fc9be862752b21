"""Resource budgets, checked when a scenario is validated, before anything is built or
any folder created: a scenario whose run could not fit in this machine's memory is
refused with one line saying what is too big, instead of dying in numpy mid-run.

The estimate is deliberately rough (within a small factor): bytes per request (the
engine's and the outputs' bookkeeping; prompts are built when read, not kept, see
sim/workload/prompts.py), per KV block (the token ids the block manager keeps per slot
plus per-block arrays, and each KV cache group's index), per tenant, priority level and
shared prompt. The budget is :data:`BUDGET_FRACTION` of physical memory, or
``PAGESIM_MEMORY_BUDGET_GB`` when set.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from sim.inputs.user_errors import UserError

#: Fraction of physical memory a run may plan to use.
BUDGET_FRACTION = 0.5
#: Bytes a request costs (request, prompt-book columns, progress, outcome, table rows).
BYTES_PER_REQUEST = 1_000
#: Bytes per KV block besides its token ids (refcount, keys, tables, free list).
BYTES_PER_BLOCK = 64
#: Bytes per KV block for each KV cache group beyond the first (a model with sliding
#: windows): each group's prefix index keeps a key, a salt and a position per block.
BYTES_PER_BLOCK_AND_GROUP = 32
#: A trace row becomes about this many bytes of requests per byte of file.
TRACE_EXPANSION = 4


class OverBudget(UserError, ValueError):
    """The scenario's run would not fit in memory; ``field`` is what to shrink."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def memory_budget_bytes() -> int:
    override = os.environ.get("PAGESIM_MEMORY_BUDGET_GB")
    if override:
        return int(float(override) * 1e9)
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(physical * BUDGET_FRACTION)


def mean_tokens(dist) -> float:
    """A length distribution's mean (a rough one for files and presets)."""
    kind = getattr(dist, "kind", None)
    if kind == "fixed":
        return float(dist.value)
    if kind == "uniform":
        return (dist.min + dist.max) / 2
    if kind == "lognormal":
        return float(dist.mean)
    if kind == "preset":
        from sim.config.workload import LENGTH_PRESETS

        return max(LENGTH_PRESETS[dist.name]["input"][0], LENGTH_PRESETS[dist.name]["output"][0])
    return 1_000.0  # an empirical table: a generous guess


def expected_requests(scenario) -> float:
    """Requests the run will generate (a trace: None -> judged by its file size)."""
    sim, arrival = scenario.simulation, scenario.workload.arrival
    rate = getattr(arrival, "rate_rps", None)
    counts = []
    staged = getattr(arrival, "expected_requests", None)
    if staged is not None:  # a staged load ends with its last stage
        counts.append(staged)
        rate = staged / arrival.total_duration_s
    if sim.num_requests is not None:
        counts.append(float(sim.num_requests))
    if sim.duration_s is not None and rate is not None:
        counts.append(rate * sim.duration_s)
    return min(counts) if counts else 0.0


def check_memory(scenario) -> None:
    """Raise OverBudget naming the biggest consumer if the run's estimate is over the
    budget. Pure arithmetic: nothing is allocated. Prompts are held only while their
    requests are in flight, so they are not counted: the estimate assumes the queue
    stays short (an overloaded run also holds the prompts of every request waiting)."""
    workload, cache = scenario.workload, scenario.cache
    device, cpu, offload = scenario.kv_pool
    groups = len(scenario.model.kv_layout.groups)
    per_block = 4 * cache.block_size + BYTES_PER_BLOCK + (groups - 1) * BYTES_PER_BLOCK_AND_GROUP
    shared = workload.prefix.num_groups * (16 + 4 * mean_tokens(workload.prefix.length))
    parts = {
        "simulation.num_requests": expected_requests(scenario) * BYTES_PER_REQUEST,
        "cache.num_blocks": scenario.routing.replicas * device * per_block,
        "cache.num_cpu_blocks": scenario.routing.replicas * cpu * per_block,
        "cache.offload": per_block
        * sum(
            n if spec.cluster_wide else scenario.routing.replicas * n
            for spec, n in zip(cache.offload, offload, strict=True)
        ),
        "workload.tenants.count": 16.0 * workload.tenants.count,
        "workload.priorities.count": 16.0 * workload.priorities.count,
        "workload.prefix.num_groups": shared,
        "workload.arrival.path": _trace_bytes(workload.arrival),
    }
    if scenario.simulation.duration_s is not None and scenario.simulation.num_requests is None:
        parts["simulation.duration_s"] = parts.pop("simulation.num_requests")
    if scenario.backend.kind == "torch" and scenario.backend.device == "cpu":
        parts["backend.kind"] = _real_backend_bytes(scenario)
    total, budget = sum(parts.values()), memory_budget_bytes()
    if math.isfinite(total) and total <= budget:
        return
    field = max(parts, key=lambda name: parts[name])
    raise OverBudget(
        field,
        f"the run would need about {_size(total)} of memory ({_size(parts[field])} for "
        f"this), over the budget of {_size(budget)} (half of this machine's memory; "
        "PAGESIM_MEMORY_BUDGET_GB sets another)",
    )


#: Bytes an element takes in the real backend, by ``backend.dtype``.
_ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def _real_backend_bytes(scenario) -> float:
    """What the torch backend on the CPU allocates in this process: every replica's
    weights and KV pool, at ``backend.dtype`` (a 70B model in fp32 is ~280 GB)."""
    element = _ELEMENT_BYTES[scenario.backend.dtype]
    model = scenario.model
    weights = model.num_params * element
    block = model.kv_block_bytes(scenario.cache.block_size, 1, element)
    kv = scenario.kv_pool.device_blocks * block
    return float(scenario.routing.replicas * (weights + kv))


def _trace_bytes(arrival) -> float:
    path = getattr(arrival, "resolved_path", None)
    if path is None:
        return 0.0
    try:
        return float(Path(path).stat().st_size * TRACE_EXPANSION)
    except OSError:
        return 0.0  # the trace reader reports a missing file, with its name


def _size(nbytes: float) -> str:
    if not math.isfinite(nbytes) or nbytes >= 1e15:
        return "more than 1,000 TB"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.1f} {unit}"
    return f"{nbytes / 1e3:,.1f} kB"
