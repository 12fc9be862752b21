"""Misbehaving plug-ins and oversized runs through the real command line (issue 14).

Every policy family's plug-in is fed back something broken (it raises, returns the
wrong kind of thing, an unknown or duplicate entry, a victim that is not running, a
replica out of range, makes no progress), and scenarios ask for more than the machine
can hold or for distributions whose maths breaks down. Each case must end in exit code
2, no traceback, one stderr line naming the culprit (the scenario field and, for a
plug-in, its hook), nothing written, and no hang (tests/adversarial/cli.py kills a
command that runs past its timeout).
"""

from __future__ import annotations

import textwrap
from functools import partial
from pathlib import Path

import pytest
import yaml

from tests.adversarial.cli import TINY_SCENARIO, one_line_error, run_cases

#: Memory pressure: preemptions happen (victim and mode plug-ins are called).
PRESSURE = {
    "cache": {"block_size": 4, "num_blocks": 40, "num_cpu_blocks": 64},
    "scheduler": {"max_num_seqs": 16, "max_num_batched_tokens": 256, "watermark": 0.0},
    "workload": {
        "arrival": {"kind": "poisson", "rate_rps": 2000},
        "input": {"kind": "uniform", "min": 4, "max": 12},
        "output": {"kind": "uniform", "min": 40, "max": 60},
    },
    "simulation": {"num_requests": 30},
}

#: Prefix caching under pressure: the evictor is asked for victims.
CACHING = {
    "cache": {"block_size": 4, "num_blocks": 48, "prefix_caching": True},
    "workload": {
        "arrival": {"kind": "poisson", "rate_rps": 200},
        "input": {"kind": "uniform", "min": 4, "max": 12},
        "output": {"kind": "uniform", "min": 2, "max": 8},
        "prefix": {"num_groups": 12, "length": 24},
    },
    "simulation": {"num_requests": 80},
}


def merged(*layers: dict) -> dict:
    """Layers merged key by key; a tagged section (one with a ``kind``) is replaced whole."""
    out: dict = {}
    for layer in layers:
        for key, value in layer.items():
            tagged = isinstance(value, dict) and "kind" in value
            if isinstance(value, dict) and isinstance(out.get(key), dict) and not tagged:
                out[key] = merged(out[key], value)
            else:
                out[key] = value
    return out


# --------------------------------------------------------------------- plug-in cases
# (field, plug-in class body, scenario layer, culprits the line must name)
PLUGINS: dict[str, tuple[str, str, dict, tuple[str, ...]]] = {}


def plugin(name, field, body, layer=None, *culprits):
    PLUGINS[name] = (field, textwrap.dedent(body), layer or {}, culprits)


S, V, M, R = "scheduler.policy", "preemption.victim", "preemption.mode", "routing.router"
B, A, E = "scheduler.batching", "scheduler.admission", "eviction.policy"
TWO = {"routing": {"replicas": 2}}

plugin(
    "scheduler raises",
    S,
    "def order(self, waiting, view):\n    raise KeyError('boom')",
    None,
    "order()",
    "KeyError",
)
plugin(
    "scheduler returns None",
    S,
    "def order(self, waiting, view):\n    return None",
    None,
    "order()",
    "None",
)
plugin(
    "scheduler returns an int", S, "def order(self, waiting, view):\n    return 3", None, "order()"
)
plugin(
    "scheduler returns duplicates",
    S,
    "def order(self, waiting, view):\n    return list(waiting) * 2",
    None,
    "twice",
)
plugin(
    "scheduler returns strings",
    S,
    "def order(self, waiting, view):\n    return ['x']",
    None,
    "not a waiting entry",
)
plugin(
    "scheduler returns requests",
    S,
    "def order(self, waiting, view):\n    return [e.request for e in waiting]",
    None,
    "not a waiting entry",
)
plugin(
    "scheduler admits nothing",
    S,
    "def order(self, waiting, view):\n    return []",
    None,
    "admitted none",
)
plugin(
    "scheduler generator raises",
    S,
    "def order(self, waiting, view):\n    yield from waiting\n    raise RuntimeError('late')",
    None,
    "order()",
)
plugin(
    "scheduler mutates the view",
    S,
    "def order(self, waiting, view):\n    view.now = 0\n    return waiting",
    None,
    "order()",
)
plugin(
    "scheduler without order",
    S,
    "def schedule(self, waiting, view):\n    return waiting",
    None,
    "order()",
)
plugin(
    "victim returns None",
    V,
    "def pick(self, running, view):\n    return None",
    PRESSURE,
    "pick()",
    "not one of the running",
)
plugin(
    "victim raises",
    V,
    "def pick(self, running, view):\n    raise ValueError('no')",
    PRESSURE,
    "pick()",
    "ValueError",
)
plugin(
    "victim returns a stranger",
    V,
    (
        "def pick(self, running, view):\n"
        "    import numpy as np\n"
        "    from sim.workload.request import Request\n"
        "    return Request(10**6, 0.0, np.zeros(4, np.int32), 4)"
    ),
    PRESSURE,
    "not one of the running",
)
plugin(
    "victim returns an index", V, "def pick(self, running, view):\n    return 0", PRESSURE, "pick()"
)
plugin(
    "mode returns a string",
    M,
    "def swap(self, victim, view):\n    return 'yes'",
    PRESSURE,
    "swap()",
    "True or False",
)
plugin(
    "mode raises",
    M,
    "def swap(self, victim, view):\n    raise RuntimeError('no')",
    PRESSURE,
    "swap()",
)
plugin("mode returns None", M, "def swap(self, victim, view):\n    return None", PRESSURE, "swap()")
plugin(
    "router out of range",
    R,
    "def route(self, request, replicas, now):\n    return 7",
    TWO,
    "route()",
    "7",
)
plugin(
    "router negative", R, "def route(self, request, replicas, now):\n    return -1", TWO, "route()"
)
plugin(
    "router None", R, "def route(self, request, replicas, now):\n    return None", TWO, "route()"
)
plugin(
    "router float", R, "def route(self, request, replicas, now):\n    return 0.5", TWO, "route()"
)
plugin(
    "router bool", R, "def route(self, request, replicas, now):\n    return True", TWO, "route()"
)
plugin(
    "router raises",
    R,
    "def route(self, request, replicas, now):\n    return 1 // 0",
    TWO,
    "route()",
    "ZeroDivisionError",
)
plugin(
    "router string", R, "def route(self, request, replicas, now):\n    return '0'", TWO, "route()"
)
plugin(
    "batching raises",
    B,
    "chunks_prompts = True\ndef compose(self, step):\n    raise OSError('disk')",
    None,
    "compose()",
)
plugin(
    "batching decodes twice",
    B,
    "chunks_prompts = True\ndef compose(self, step):\n    step.decodes()\n    step.decodes()",
    None,
    "compose()",
    "twice",
)
plugin(
    "batching never admits",
    B,
    "chunks_prompts = True\ndef compose(self, step):\n    step.decodes()",
    None,
    "compose()",
    "no admissions",
)
plugin(
    "batching filter raises",
    B,
    (
        "chunks_prompts = True\n"
        "def compose(self, step):\n"
        "    step.decodes()\n"
        "    step.admit(only=lambda r: 1 / 0)"
    ),
    None,
    "only",
)
plugin(
    "batching flag not bool",
    B,
    "chunks_prompts = 'yes'\ndef compose(self, step):\n    step.admit()",
    None,
    "chunks_prompts",
)
plugin("batching without compose", B, "chunks_prompts = True", None, "compose()")
plugin(
    "batching optional flag not bool",
    B,
    "chunks_prompts = True\ndecode_stretches = 'yes'\ndef compose(self, step):\n    step.admit()",
    None,
    "decode_stretches",
)
plugin(
    "admission optional flag not bool",
    A,
    (
        "whole_prompt = False\n"
        "whole_sequence_must_fit = 2\n"
        "def first_tokens(self, total, cached, budget):\n"
        "    return total"
    ),
    None,
    "whole_sequence_must_fit",
)
plugin(
    "admission returns 0",
    A,
    "whole_prompt = False\ndef first_tokens(self, total, cached, budget):\n    return 0",
    None,
    "first_tokens()",
)
plugin(
    "admission returns too many",
    A,
    "whole_prompt = False\ndef first_tokens(self, total, cached, budget):\n    return total + 5",
    None,
    "first_tokens()",
)
plugin(
    "admission returns None",
    A,
    "whole_prompt = False\ndef first_tokens(self, total, cached, budget):\n    return None",
    None,
    "first_tokens()",
)
plugin(
    "admission raises",
    A,
    (
        "whole_prompt = False\n"
        "def first_tokens(self, total, cached, budget):\n"
        "    raise ValueError('x')"
    ),
    None,
    "first_tokens()",
)
plugin(
    "admission flag not bool",
    A,
    "whole_prompt = 1\ndef first_tokens(self, total, cached, budget):\n    return total",
    None,
    "whole_prompt",
)

EVICTOR = """
from backend.evictor import EvictorBase
from collections import OrderedDict

class Base(EvictorBase):
    def __init__(self):
        self.order = OrderedDict()
    def on_cached(self, block, now, key):
        self.order[block] = None
    def on_removed(self, block):
        del self.order[block]
    def pick_victims(self, n):
        return [self.order.popitem(last=False)[0] for _ in range(min(n, len(self.order)))]
    def __len__(self):
        return len(self.order)
    def __contains__(self, block):
        return block in self.order
    def blocks(self):
        return list(self.order)
"""
EVICTORS = {
    "evictor returns duplicates": (
        "def pick_victims(self, n):\n    b = self.blocks()[:1]\n    return b * n",
        "pick_victims()",
    ),
    "evictor returns strangers": (
        "def pick_victims(self, n):\n    return list(range(10_000, 10_000 + n))",
        "pick_victims()",
    ),
    "evictor returns too few": ("def pick_victims(self, n):\n    return []", "pick_victims()"),
    "evictor raises on cache": (
        "def on_cached(self, block, now, key):\n    raise MemoryError('full')",
        "on_cached()",
    ),
    "evictor returns None": ("def pick_victims(self, n):\n    return None", "pick_victims()"),
}


def plugin_case(folder: Path, name: str) -> tuple[list[str], list[str]]:
    field, body, layer, culprits = PLUGINS[name]
    section, _, key = field.partition(".")
    source = "class Plug:\n" + textwrap.indent(body, "    ") + "\n"
    (folder / "plug.py").write_text(source)
    choice = {section: {key: "plug.py:Plug"}}
    return _scenario(folder, merged(TINY_SCENARIO, layer, choice)), [field, *culprits]


def evictor_case(folder: Path, name: str) -> tuple[list[str], list[str]]:
    body, hook = EVICTORS[name]
    source = EVICTOR + "\nclass Plug(Base):\n" + textwrap.indent(body, "    ") + "\n"
    (folder / "plug.py").write_text(source)
    layer = merged(TINY_SCENARIO, CACHING, {"eviction": {"policy": "plug.py:Plug"}})
    return _scenario(folder, layer), [E, hook]


MODULES = {
    "module with a syntax error": ("class Plug(:\n", ("scheduler.policy", "SyntaxError")),
    "module that raises on import": (
        "raise RuntimeError('import-time failure')\n",
        ("scheduler.policy", "RuntimeError"),
    ),
    "module without the class": ("class Other:\n    pass\n", ("scheduler.policy", "Plug")),
    "constructor raises": (
        "class Plug:\n    def __init__(self):\n        raise RuntimeError('ctor')\n",
        ("scheduler.policy", "RuntimeError"),
    ),
    "factory returns an int": ("def Plug():\n    return 42\n", ("scheduler.policy", "order()")),
    "constructor wants a parameter": (
        "class Plug:\n    def __init__(self, weight):\n        pass\n"
        "    def order(self, w, v):\n        return w\n",
        ("scheduler.params", "weight"),
    ),
}


def module_case(folder: Path, name: str) -> tuple[list[str], list[str]]:
    source, culprits = MODULES[name]
    (folder / "plug.py").write_text(source)
    layer = merged(TINY_SCENARIO, {"scheduler": {"policy": "plug.py:Plug"}})
    return _scenario(folder, layer), list(culprits)


# ------------------------------------------------------------------------ budgets
BUDGETS = {
    "a trillion requests": ({"simulation": {"num_requests": 10**12}}, "simulation.num_requests"),
    "a trillion blocks": ({"cache": {"num_blocks": 10**12}}, "cache.num_blocks"),
    "a trillion CPU blocks": ({"cache": {"num_cpu_blocks": 10**12}}, "cache.num_cpu_blocks"),
    "a billion-token block": ({"cache": {"block_size": 10**9, "num_blocks": 1000}}, "cache"),
    "an endless duration": (
        {"simulation": {"num_requests": None, "duration_s": 1e300}},
        "simulation.duration_s",
    ),
    "two billion tenants": (
        {"workload": {"tenants": {"count": 2 * 10**9}}},
        "workload.tenants.count",
    ),
    "two billion priorities": (
        {"workload": {"priorities": {"count": 2 * 10**9}}},
        "workload.priorities.count",
    ),
    "a billion shared prompts": (
        {"workload": {"prefix": {"num_groups": 10**9, "length": 16}}},
        "workload.prefix.num_groups",
    ),
    "gamma cv of 1e300": (
        {"workload": {"arrival": {"kind": "gamma", "rate_rps": 5, "cv": 1e300}}},
        "workload.arrival.cv",
    ),
    "gamma cv of 1e-300": (
        {"workload": {"arrival": {"kind": "gamma", "rate_rps": 5, "cv": 1e-300}}},
        "workload.arrival.cv",
    ),
    "lognormal mean of 1e20": (
        {"workload": {"input": {"kind": "lognormal", "mean": 1e20, "cv": 1}}},
        "workload.input",
    ),
    "lognormal cv of 1e10": (
        {"workload": {"input": {"kind": "lognormal", "mean": 100, "cv": 1e10}}},
        "workload.input.cv",
    ),
    "lengths that all overshoot": (
        {"workload": {"input": {"kind": "uniform", "min": 4000, "max": 5000}}},
        "workload.input",
    ),
    "max_scan of infinity": (
        {"scheduler": {"policy": "longest-prefix-match", "params": {"max_scan": float("inf")}}},
        "scheduler.params",
    ),
    "prefix_tokens of infinity": (
        {
            "routing": {
                "replicas": 2,
                "router": "prefix-affinity",
                "params": {"prefix_tokens": float("inf")},
            }
        },
        "routing.params",
    ),
    "aging of NaN": (
        {"scheduler": {"policy": "priority", "params": {"aging_s": float("nan")}}},
        "scheduler.params",
    ),
    "half-life of minus one": (
        {
            "cache": {"prefix_caching": True},
            "eviction": {"policy": "reuse-weighted", "params": {"half_life": -1}},
        },
        "eviction.params",
    ),
    "protected fraction of two": (
        {
            "cache": {"prefix_caching": True},
            "eviction": {"policy": "slru", "params": {"protected_fraction": 2}},
        },
        "eviction.params",
    ),
    "an unknown edf option": (
        {"scheduler": {"policy": "edf", "params": {"late": "first"}}},
        "scheduler.params",
    ),
    "params for a policy without any": (
        {"preemption": {"victim": "most-blocks", "params": {"depth": 2}}},
        "preemption.params",
    ),
}


def budget_case(folder: Path, name: str) -> tuple[list[str], list[str]]:
    layer, culprit = BUDGETS[name]
    return _scenario(folder, merged(TINY_SCENARIO, layer)), [culprit]


def _scenario(folder: Path, raw: dict) -> list[str]:
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return ["run", str(path), "--out", str(folder / "out"), "--quiet", "--no-report"]


BUILDERS = {
    **{f"plug-in: {n}": (plugin_case, n) for n in PLUGINS},
    **{f"plug-in: {n}": (evictor_case, n) for n in EVICTORS},
    **{f"plug-in module: {n}": (module_case, n) for n in MODULES},
    **{f"budget: {n}": (budget_case, n) for n in BUDGETS},
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Every case built in its own folder and run concurrently, once per module."""
    builds = {name: partial(build, name=key) for name, (build, key) in BUILDERS.items()}
    return run_cases(builds, lambda: tmp_path_factory.mktemp("plugins"))


def test_there_are_enough_cases():
    assert len(BUILDERS) >= 60


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_each_case_is_one_line_and_writes_nothing(outcomes, name):
    outcome = outcomes[name]
    problem = one_line_error(outcome.result, *outcome.culprits)
    assert problem == "", problem
    assert outcome.after == outcome.before
