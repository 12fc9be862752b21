"""Where the CPU time of a simulated step goes: exclusive time of the step's parts.

For each case (bench/sim_speed.py's CASES) child processes run the same scenario through
``sim.run.runner.simulate``: one as shipped (its CPU time is the reference; ``--repeats``
takes the median of several) and one with about seventy engine, allocator, cost-model,
step-log, SimPy and runner functions wrapped at run time (class and module attributes
patched in that child only; no simulator file changes). Each wrapper times its call with
``time.process_time_ns`` (process CPU time, 1 ns resolution, a system call of ~0.4 us
here; ``--clock wall``: ``perf_counter_ns``, cheaper, but it counts time the process waits
for a CPU) and keeps EXCLUSIVE time: a wrapped callee's time is taken out of its wrapped
caller's. Simulate's own body is the remainder line; cyclic garbage collection during the
run is its own line (``gc.callbacks``), taken out of whatever it interrupted. Generators
(the replica loop, the arrival process) are not wrapped: the code between their
``yield``s counts in SimPy's ``Process._resume``. Small helpers are left unwrapped on
purpose (fewer clock reads); a label's note says what else its time holds.

Per case it prints steps, requests, the plain run's CPU seconds and the load average,
then a table by group (plan, allocator, cost model, apply, record, arrivals & routing,
fast-forward, SimPy + loop remainder, GC, before and after the loop): microseconds per
step (the run's steps, those fast-forwarded in decode stretches included), share, calls
per step, microseconds per call and per request. A label's kind is ``step`` (scales with
steps), ``req`` (scales with requests: admission, allocate, free, outcomes, arrivals) or
``once`` (the workload, building the replicas, the summary).

Distortion: each wrapped call reads the clock twice and keeps a stack. That cost is
measured before the run on an empty wrapped method (the part inside the callee's time,
the part in its caller's) and subtracted (calls x inside, direct wrapped children x
outside). It is a lower bound: the clock's system calls also slow the code around them,
and on a loaded machine CPU time itself moves by tens of percent from run to run. So the
header prints the instrumented total less that cost against the plain run, and by
default (``--scale none``: not) the table multiplies every label by the one factor that
brings its sum to the plain run's CPU time: shares are as measured, microseconds are the
plain run's. Labels of about a microsecond a call or less are the least exact (a
negative one is below what the correction can resolve); run on a quiet machine.

    .venv/bin/python bench/step_cost.py --cases default-100k
    .venv/bin/python bench/step_cost.py --cases default-100k low-batch --requests 30000

Nothing here asserts on time (tests never do).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import inspect
import json
import os
import statistics
import sys
import time

from sim_speed import CASES, ROOT, child_figures

# (group, kind) -> "module:Owner.attr" or "module:function"; the label is "Owner.attr" (or
# "module.function"). Each attribute must be in the owner's own namespace: patching it there
# keeps the MRO, so the engine's choice of unchecked allocator entries (the Protocols of
# backend.base) is unchanged; a target that moved fails loudly (KeyError).
PLAN, ALLOC, COST, APPLY, RECORD = "plan", "allocator", "cost model", "apply", "record"
ARRIVE, FFWD, SIMPY = "arrivals & routing", "fast-forward", "SimPy + loop remainder"
GC, ONCE = "garbage collector", "before and after the loop"
ENGINE, BLOCKS, TOKENS = "sim.engine.", "backend.blocks.", "sim.workload.tokens:"
TARGETS = {
    (PLAN, "step"): [
        ENGINE + "planning.planner:StepPlanner.plan",
        ENGINE + "memory:Memory.swap_in_waiting",
        ENGINE + "planning.planner:StepPlanner.schedule_decodes",
        TOKENS + "SyntheticOutputs.decode_inputs",
        ENGINE + "planning.planner:StepPlanner.schedule_running_prefills",
        ENGINE + "planning.planner:StepPlanner.admit_waiting",
    ],
    (PLAN, "req"): [
        ENGINE + "planning.planner:StepPlanner.admit",
        ENGINE + "memory:Memory.make_room",
    ],
    (ALLOC, "step"): [
        BLOCKS + "manager:BlockManager.append_batch_trusted",
        BLOCKS + "group_tables:GroupTables._append_batch_sharing",
        BLOCKS + "manager:BlockManager.usage",
        BLOCKS + "manager:BlockManager.plain_decode_steps",
        BLOCKS + "manager:BlockManager.append_steps_trusted",
    ],
    (ALLOC, "req"): [
        BLOCKS + "manager:BlockManager.allocate_trusted",
        BLOCKS + "manager:BlockManager.append",
        BLOCKS + "manager:BlockManager.mark_computed",
        BLOCKS + "manager:BlockManager.fork",
        BLOCKS + "manager:BlockManager.free",
        BLOCKS + "swap:SwapSpace.swap_out",
        BLOCKS + "swap:SwapSpace.swap_in",
    ],
    (COST, "step"): [
        f"sim.costs.{module}:{cls}CostModel.{method}"
        for module, cls in (
            ("analytic", "Analytic"),
            ("calibrated", "Calibrated"),
            ("profile", "Profile"),
        )
        for method in ("execute", "decode_steps")
    ],
    (APPLY, "step"): [
        ENGINE + "completion:Completion.apply",
        ENGINE + "completion:Completion.apply_decodes",
        ENGINE + "gaps:TokenGaps.tokens",
    ],
    (APPLY, "req"): [
        ENGINE + "gaps:TokenGaps.token_after",
        ENGINE + "replica_state:DecodeSet.take",
        ENGINE + "replica_state:DecodeSet.extend",
        ENGINE + "completion:Completion.complete_prefill",
        ENGINE + "completion:Completion.fork",
        TOKENS + "SyntheticOutputs.stream_state",
        ENGINE + "completion:Completion.sample_done",
        ENGINE + "replica:Replica._finished",
        ENGINE + "state:RequestProgress.outcome",
    ],
    (RECORD, "step"): [
        ENGINE + "replica:Replica._step_record",
        "sim.output.steplog:StepLog.record",
        "sim.output.steplog:StepLog.record_rows",
    ],
    (ARRIVE, "req"): [
        ENGINE + "replica:Replica.submit",
        ENGINE + "replica:Replica.never_fits",
        ENGINE + "replica:Replica.settle",
        TOKENS + "SyntheticOutputs.prompt",
    ],
    (FFWD, "step"): [
        ENGINE + "fast_forward:FastForward.begin",
        ENGINE + "fast_forward:FastForward.finish",
        ENGINE + "fast_forward:FastForward.cut",
        ENGINE + "fast_forward:FastForward._plan",
        TOKENS + "SyntheticOutputs.tokens",
        ENGINE + "fast_forward:FastForward._apply",
        ENGINE + "gaps:TokenGaps.decode_stretch",
        ENGINE + "fast_forward:FastForward._rows",
    ],
    (SIMPY, "step"): [
        "simpy.core:Environment.run",
        "simpy.core:Environment.step",
        "simpy.events:Process._resume",
        "simpy.events:Timeout.__init__",
        "simpy.events:Process.interrupt",
    ],
    (ONCE, "once"): [
        "sim.run.runner:generate_requests",
        "sim.run.build:policy_context",
        "sim.run.build:build_allocator",
        "sim.run.runner:build_executor",
        ENGINE + "replica:Replica.__init__",
        ENGINE + "cluster:Arrivals.unfinished_outcomes",
        "sim.run.runner:_all_token_gaps",
        "sim.run.runner:cost_model_report",
        "gc:collect",
        "sim.run.runner:summarize",
    ],
}
#: what a label's exclusive time holds, where the name does not say
NOTES = {
    "StepPlanner.plan": "StepBuilder, Batch",
    "StepPlanner.schedule_decodes": "+ blank decode tokens",
    "StepPlanner.admit": "+ watermark, prefix lookup",
    "SyntheticOutputs.decode_inputs": "decode tokens",
    "SyntheticOutputs.tokens": "stretch tokens",
    "SyntheticOutputs.stream_state": "per sample",
    "SyntheticOutputs.prompt": "for the engine",
    "BlockManager.usage": "for the step record",
    "BlockManager.append": "prompt chunk growth",
    "Completion.apply": "+ step_ended",
    "Replica._finished": "+ runner's on_done",
    "Replica._step_record": "StepRecord, queue head, swapped",
    "Replica.submit": "+ blank prompt",
    "FastForward.begin": "+ horizon",
    "Environment.run": "its loop",
    "Environment.step": "pop, dispatch",
    "Process._resume": "+ loop bodies between yields, _watch",
    "Timeout.__init__": "+ schedule",
    "Process.interrupt": "a stretch cut",
    "gc.collect": "explicit, after the loop",
}
#: policies: every registered class's own method (registry name, method, group, kind)
POLICY_TARGETS = [
    ("batching", "BATCHING", "compose", PLAN, "step"),
    ("scheduling", "SCHEDULERS", "order", PLAN, "step"),
    ("routing", "ROUTERS", "route", ARRIVE, "req"),
]
GC_LABEL = (GC, "step", "cyclic GC during the run")
REMAINDER = (ONCE, "once", "simulate's own code (no wrapped call)")
GROUPS = [PLAN, ALLOC, COST, APPLY, RECORD, ARRIVE, FFWD, SIMPY, GC, ONCE]
CLOCKS = {"cpu": time.process_time_ns, "wall": time.perf_counter_ns}


class Profile:
    """Exclusive time and calls per label. A frame is [wrapped children's ns, their
    calls]; stats[label] is [exclusive ns, calls, direct wrapped children's calls]."""

    def __init__(self, clock):
        self.clock = clock
        self.stats: dict[str, list[int]] = {}
        self.base = [0, 0]
        self.stack = [self.base]
        self.in_run = False  # inside Environment.run: automatic GC gets its own line
        self._gc_start = 0

    def wrap(self, label: str, fn):
        stats = self.stats.setdefault(label, [0, 0, 0])
        stack, clock = self.stack, self.clock

        def wrapper(*args, **kwargs):
            frame = [0, 0]
            stack.append(frame)
            start = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = clock() - start
                stack.pop()
                stats[0] += elapsed - frame[0]
                stats[1] += 1
                stats[2] += frame[1]
                parent = stack[-1]
                parent[0] += elapsed
                parent[1] += 1

        wrapper.__wrapped__ = fn
        return wrapper

    def on_gc(self, phase: str, info: dict) -> None:
        """gc.callbacks: a collection during the run is taken out of what it interrupted."""
        if not self.in_run:
            return
        if phase == "start":
            self._gc_start = self.clock()
            return
        elapsed = self.clock() - self._gc_start
        self.stats.setdefault(GC_LABEL[2], [0, 0, 0])
        self.stats[GC_LABEL[2]][0] += elapsed
        self.stats[GC_LABEL[2]][1] += 1
        self.stack[-1][0] += elapsed


def label_of(target: str) -> str:
    module, _, path = target.partition(":")
    name = path if "." in path else f"{module.rsplit('.', 1)[-1]}.{path}"
    return f"{name} ({NOTES[name]})" if name in NOTES else name


def patch(profile: Profile, target: str, label: str) -> None:
    module_name, _, path = target.partition(":")
    owner_name, _, attr = path.rpartition(".")
    owner = importlib.import_module(module_name)
    if owner_name:
        owner = getattr(owner, owner_name)
    raw = vars(owner)[attr]  # KeyError: the target moved; fix TARGETS
    if inspect.isgeneratorfunction(raw):
        raise TypeError(f"{target} is a generator: its time would end at the first yield")
    setattr(owner, attr, profile.wrap(label, raw))


def instrument(profile: Profile) -> dict[str, tuple[str, str]]:
    """Patch every target (before the run builds anything: the engine binds some methods
    once); returns label -> (group, kind)."""
    kinds = {}
    for (group, kind), targets in TARGETS.items():
        for target in targets:
            kinds[label_of(target)] = (group, kind)
            patch(profile, target, label_of(target))
    for module, registry, method, group, kind in POLICY_TARGETS:
        found = getattr(importlib.import_module(f"policies.{module}"), registry)
        for name in found.names():
            cls = found.get(name)
            if method in vars(cls):
                label = f"{cls.__name__}.{method} (policy)"
                patch(profile, f"{cls.__module__}:{cls.__name__}.{method}", label)
                kinds[label] = (group, kind)
    import simpy.core

    run = simpy.core.Environment.run

    def run_flagged(*args, **kwargs):
        profile.in_run = True
        try:
            return run(*args, **kwargs)
        finally:
            profile.in_run = False

    simpy.core.Environment.run = run_flagged
    gc.callbacks.append(profile.on_gc)
    profile.stats.setdefault(GC_LABEL[2], [0, 0, 0])
    kinds[GC_LABEL[2]] = GC_LABEL[:2]
    return kinds


def calibrate(clock, rounds: int = 7, calls: int = 20000) -> tuple[float, float]:
    """Wrapper overhead per call in ns: (inside the callee's time, outside it, in the
    caller's), medians over ``rounds`` loops of an empty wrapped two-argument method."""

    class Probe:
        def empty(self, a, b):
            return None

    probe, inside, outside = Probe(), [], []
    for _ in range(rounds):
        scratch = Profile(clock)
        wrapped = scratch.wrap("probe", Probe.empty)
        start = clock()
        for i in range(calls):
            Probe.empty(probe, i, None)
        bare = clock() - start
        start = clock()
        for i in range(calls):
            wrapped(probe, i, None)
        total = clock() - start - bare
        inner = scratch.stats["probe"][0] - bare
        inside.append(inner / calls)
        outside.append((total - inner) / calls)
    return statistics.median(inside), statistics.median(outside)


def load(case: str, requests: int | None):
    from sim.config.loader import load_scenario

    path, overrides = CASES[case]
    if requests:
        overrides = [*overrides, f"simulation.num_requests={requests}"]
    return load_scenario(ROOT / path, overrides)


def run_plain(case: str, requests: int | None) -> dict:
    from sim.run.runner import simulate

    scenario = load(case, requests)
    cpu, wall = time.process_time(), time.perf_counter()
    result = simulate(scenario)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {
        "cpu_s": cpu,
        "wall_s": wall,
        "steps": result.num_steps,
        "forwarded": result.fast_forwarded_steps,
        "requests": len(result.outcomes),
    }


def run_instrumented(case: str, requests: int | None, clock_name: str) -> dict:
    from sim.run import runner

    clock = CLOCKS[clock_name]
    scenario = load(case, requests)
    inside, outside = calibrate(clock)
    profile = Profile(clock)
    kinds = instrument(profile)
    cpu, wall = time.process_time(), time.perf_counter()
    start = clock()
    result = runner.simulate(scenario)
    total = clock() - start
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    profile.stats[REMAINDER[2]] = [total - profile.base[0], 1, profile.base[1]]
    kinds[REMAINDER[2]] = REMAINDER[:2]
    return {
        "cpu_s": cpu,
        "wall_s": wall,
        "total_ns": total,
        "inside_ns": inside,
        "outside_ns": outside,
        "stats": profile.stats,
        "kinds": kinds,
        "steps": result.num_steps,
        "forwarded": result.fast_forwarded_steps,
    }


def child(case: str, mode: str, requests: int | None) -> dict:
    command = [sys.executable, __file__, "--child", case, mode, str(requests or 0)]
    return child_figures(command, f"the {mode} run of {case}")


# -- the table ------------------------------------------------------------------------------
def scale_of(plain: dict, run: dict, mode: str) -> float:
    """``plain``: the factor that brings the instrumented run, less the empty method's
    wrapper cost, to the plain run's CPU time (the rest of the distortion, and the load's
    effect on CPU time, taken as spread evenly); ``none``: 1."""
    if mode == "none" or run["clock"] != "cpu":
        return 1.0
    wrapper = wrapped_calls(run) * (run["inside_ns"] + run["outside_ns"])
    return plain["cpu_s"] * 1e9 / (run["total_ns"] - wrapper)


def wrapped_calls(run: dict) -> int:
    return sum(calls for label, (_, calls, _) in run["stats"].items() if label != REMAINDER[2])


def corrected(run: dict, scale: float) -> tuple[dict, float]:
    """label -> (exclusive ns less the wrapper's share, times ``scale``; calls), and the
    wrapper's total (unscaled)."""
    inside, outside = run["inside_ns"], run["outside_ns"]
    rows, wrapper = {}, 0.0
    for label, (excl, calls, children) in run["stats"].items():
        if label == REMAINDER[2]:
            calls = 0  # simulate itself is not wrapped: only its children's outside part
        cost = calls * inside + children * outside
        rows[label] = ((excl - cost) * scale, calls)
        wrapper += cost
    return rows, wrapper


def row(label: str, kind: str, ns: float, calls: int | None, net: float, run: dict) -> str:
    """One line; ``calls`` None for a subtotal."""
    steps, requests = run["steps"], run["requests"]
    per_step = f"{calls / steps:>8.3f}" if calls is not None else f"{'':>8}"
    per_call = f"{ns / calls / 1e3:>8.2f}" if calls else f"{'':>8}"
    return (
        f"  {label:<54} {kind:<4} {ns / steps / 1e3:>8.2f} {ns / net:>6.1%} "
        f"{per_step} {per_call} {ns / requests / 1e3:>8.2f}"
    )


def header(case: str, plain: dict, run: dict, scale: float) -> list[str]:
    steps, requests, cpu = run["steps"], run["requests"], plain["cpu_s"]
    calls = wrapped_calls(run)
    wrapper = calls * (run["inside_ns"] + run["outside_ns"])
    left_s = (run["total_ns"] - wrapper) / 1e9
    unit = "process CPU" if run["clock"] == "cpu" else "wall"
    return [
        f"== {case}: {requests:,} requests, {steps:,} steps ({run['forwarded'] / steps:.0%} "
        f"fast-forwarded in decode stretches), {steps / requests:.2f} steps per request",
        f"   plain run: {cpu:.2f} CPU s = {cpu / steps * 1e6:.1f} us/step = "
        f"{cpu / requests * 1e6:.1f} us/request (wall {plain['wall_s']:.2f} s, "
        f"load {plain['load']:.2f})",
        f"   instrumented: {run['cpu_s']:.2f} CPU s (wall {run['wall_s']:.2f} s, load "
        f"{run['load']:.2f}), {calls / steps:.1f} wrapped calls a step, clock: {unit}",
        f"   wrapper cost on an empty method {run['inside_ns']:.0f} ns in the callee + "
        f"{run['outside_ns']:.0f} ns in the caller a call = {wrapper / 1e9:.2f} s",
        f"   instrumented - that = {left_s:.2f} s = plain {left_s / cpu - 1:+.1%}; the table: "
        f"exclusive times less it, x {scale:.3f} (sum {left_s * scale:.2f} s)",
        f"  {'group / label (exclusive time)':<54} {'kind':<4} {'us/step':>8} {'share':>6} "
        f"{'calls/st':>8} {'us/call':>8} {'us/req':>8}",
    ]


def body(run: dict, rows: dict, net: float) -> tuple[list[str], dict[str, float]]:
    """Each group's subtotal, then its labels, largest first; and ns by kind."""
    lines, by_kind = [], {"step": 0.0, "req": 0.0, "once": 0.0}
    for group in GROUPS:
        members = [(lab, *rows[lab]) for lab, (g, _) in run["kinds"].items() if g == group]
        members = [m for m in members if m[2] or m[0] == REMAINDER[2]]  # (called at all)
        lines.append(row(f"[{group}]", "", sum(m[1] for m in members), None, net, run))
        for label, ns, calls in sorted(members, key=lambda m: -m[1]):
            kind = run["kinds"][label][1]
            by_kind[kind] += ns
            lines.append(row(label, kind, ns, calls, net, run))
    return lines, by_kind


def footer(run: dict, by_kind: dict, wrapper: float, net: float, scale: float) -> list[str]:
    steps, requests = run["steps"], run["requests"]
    step, req, once = by_kind["step"], by_kind["req"], by_kind["once"]
    return [
        f"  [wrapper, instrumented run, not above]{'':<21} {wrapper / steps / 1e3:>8.2f}",
        f"  check: (labels + remainder) / scale + wrapper = "
        f"{(sum(by_kind.values()) / scale + wrapper) / 1e9:.3f} s; the clock around simulate: "
        f"{run['total_ns'] / 1e9:.3f} s",
        f"  per step    (kind step): {step / steps / 1e3:8.2f} us/step ({step / net:.0%})",
        f"  per request (kind req):  {req / requests / 1e3:8.2f} us/request "
        f"= {req / steps / 1e3:.2f} us/step ({req / net:.0%})",
        f"  once (kind once):        {once / 1e9:8.2f} s = {once / steps / 1e3:.2f} us/step "
        f"({once / net:.0%})",
    ]


def table(case: str, plain: dict, run: dict, mode: str) -> list[str]:
    run["requests"] = plain["requests"]
    scale = scale_of(plain, run, mode)
    rows, wrapper = corrected(run, scale)
    net = sum(ns for ns, _ in rows.values())
    lines, by_kind = body(run, rows, net)
    return header(case, plain, run, scale) + lines + footer(run, by_kind, wrapper, net, scale)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES), default=["default-100k"])
    parser.add_argument("--requests", type=int, help="override simulation.num_requests")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    parser.add_argument(
        "--scale",
        choices=("plain", "none"),
        default="plain",
        help="bring the table's sum to the plain run's CPU time (default; CPU clock only) "
        "or leave the instrumented run's times, less the wrapper cost",
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="plain runs: the median's CPU time is the reference"
    )
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        case, mode, requests = args.child[0], args.child[1], int(args.child[2]) or None
        sys.path.insert(0, str(ROOT))
        if mode == "plain":
            print(json.dumps(run_plain(case, requests)))
        else:
            print(json.dumps(run_instrumented(case, requests, mode)))
        return
    print(f"pagesim step cost: {ROOT} ({os.cpu_count()} CPUs)")
    for case in args.cases:
        plains = [child(case, "plain", args.requests) for _ in range(args.repeats)]
        plain = sorted(plains, key=lambda p: p["cpu_s"])[(len(plains) - 1) // 2]  # the median
        run = child(case, args.clock, args.requests)
        run["clock"] = args.clock
        print("\n".join(table(case, plain, run, args.scale)), flush=True)
    print("kind: step scales with steps, req with requests, once is paid once per run")


if __name__ == "__main__":
    main()
