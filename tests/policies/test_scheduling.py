"""Scheduling policies: exact orders on hand-written queues."""

from __future__ import annotations

import csv
import statistics
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from policies.context import SLO, PolicyContext, PolicyError, ServedTokens, build_policy
from policies.scheduling import SCHEDULERS
from sim.cli import main
from sim.workload.request import Request


@dataclass
class Entry:
    request: Request
    resumed: bool = False


@dataclass
class View:
    """A replica view with a fixed cache content and per-tenant service."""

    now: float = 100.0
    cached: dict[int, int] = field(default_factory=dict)  # req_id -> cached tokens
    lookups: list[int] = field(default_factory=list)

    def cached_prefix_tokens(self, request):
        self.lookups.append(request.req_id)
        return self.cached.get(request.req_id, 0)


def req(req_id, arrival_s, prompt_len=8, output_len=4, **kw):
    prompt = np.arange(prompt_len, dtype=np.int32)
    return Request(req_id=req_id, arrival_s=arrival_s, prompt=prompt, output_len=output_len, **kw)


def ids(entries):
    return [e.request.req_id for e in entries]


def make(name, context=None, **params):
    """The registered scheduler ``name``, built as a run builds it."""
    context = context or PolicyContext.standalone(served_tokens=ServedTokens())
    return build_policy(SCHEDULERS, name, params, context)


def test_every_policy_is_registered():
    expected = {
        "fcfs",
        "priority",
        "shortest-prompt-first",
        "sjf-oracle",
        "fair-share",
        "longest-prefix-match",
        "edf",
    }
    assert expected <= set(SCHEDULERS.names())


def test_fcfs_returns_the_queue_itself():
    waiting = deque([Entry(req(1, 0.0)), Entry(req(0, 1.0))])
    assert make("fcfs").order(waiting, View()) is waiting


def test_priority_orders_by_level_then_arrival():
    waiting = deque(
        [
            Entry(req(0, 0.0, priority=0)),
            Entry(req(1, 1.0, priority=2)),
            Entry(req(2, 2.0, priority=1)),
            Entry(req(3, 3.0, priority=2)),
        ]
    )
    # aging_s large: aging is negligible within 3 s.
    assert ids(make("priority", aging_s=1e6).order(waiting, View())) == [1, 3, 2, 0]


def test_priority_aging_lets_an_old_low_priority_request_pass():
    # Request 0 (priority 0) waited 25 s longer than request 1 (priority 2): with one
    # level per 10 s it has earned 2.5 levels and goes first; with 20 s only 1.25.
    waiting = deque([Entry(req(0, 0.0, priority=0)), Entry(req(1, 25.0, priority=2))])
    assert ids(make("priority", aging_s=10.0).order(waiting, View())) == [0, 1]
    assert ids(make("priority", aging_s=20.0).order(waiting, View())) == [1, 0]


def test_priority_rejects_a_non_positive_aging_time():
    with pytest.raises(ValueError, match="aging_s"):
        make("priority", aging_s=0)


def test_shortest_prompt_first_ties_by_arrival():
    waiting = deque(
        [
            Entry(req(0, 0.0, prompt_len=64)),
            Entry(req(1, 1.0, prompt_len=8)),
            Entry(req(2, 2.0, prompt_len=32)),
            Entry(req(3, 0.5, prompt_len=8)),
        ]
    )
    assert ids(make("shortest-prompt-first").order(waiting, View())) == [3, 1, 2, 0]


def test_sjf_oracle_counts_output_times_samples():
    waiting = deque(
        [
            Entry(req(0, 0.0, output_len=10)),
            Entry(req(1, 1.0, output_len=4, n=3)),  # 12 tokens in all
            Entry(req(2, 2.0, output_len=2)),
            Entry(req(3, 3.0, output_len=10, prompt_len=4)),  # ties 0 on output, shorter prompt
        ]
    )
    assert ids(make("sjf-oracle").order(waiting, View())) == [2, 3, 0, 1]


def test_fair_share_prefers_the_least_served_tenant():
    waiting = deque(
        [
            Entry(req(0, 0.0, tenant=0)),
            Entry(req(1, 1.0, tenant=1)),
            Entry(req(2, 2.0, tenant=2)),
            Entry(req(3, 3.0, tenant=1)),
        ]
    )
    served = ServedTokens()
    served.add(0, 500)
    served.add_each(np.ones(20, np.int64))  # tenant 2 has had nothing
    policy = make("fair-share", PolicyContext.standalone(served_tokens=served))
    assert ids(policy.order(waiting, View())) == [2, 1, 3, 0]
    with pytest.raises(PolicyError, match="served_tokens"):
        make("fair-share", PolicyContext.standalone())  # the run gives it only when asked


def test_longest_prefix_match_prefers_cached_prompts():
    waiting = deque([Entry(req(i, float(i))) for i in range(4)])
    view = View(cached={1: 16, 2: 48, 3: 16})
    assert ids(make("longest-prefix-match").order(waiting, view)) == [2, 1, 3, 0]


def test_longest_prefix_match_ranks_only_the_scanned_head():
    waiting = deque([Entry(req(i, float(i))) for i in range(5)])
    view = View(cached={1: 16, 4: 64})
    order = make("longest-prefix-match", max_scan=3).order(waiting, view)
    # Request 4 has the longest prefix but lies beyond the scan window: arrival order.
    assert ids(order) == [1, 0, 2, 3, 4]
    assert sorted(view.lookups) == [0, 1, 2]


@pytest.mark.parametrize(
    "name",
    ["priority", "shortest-prompt-first", "sjf-oracle", "fair-share", "longest-prefix-match"],
)
def test_resumed_entries_stay_first_in_queue_order(name):
    waiting = deque(
        [
            Entry(req(5, 5.0, prompt_len=90, output_len=90), resumed=True),
            Entry(req(4, 4.0, prompt_len=80, output_len=80), resumed=True),
            Entry(req(0, 0.0, prompt_len=8, output_len=2, priority=3)),
            Entry(req(1, 1.0, prompt_len=8, output_len=2, priority=3)),
        ]
    )
    before = list(waiting)
    order = make(name).order(waiting, View(cached={0: 8, 1: 8}))
    assert ids(order) == [5, 4, 0, 1]
    assert list(waiting) == before  # not mutated


# ------------------------------------------------------------------ a user's own plug-in

REPO = Path(__file__).resolve().parents[2]
PLUGIN_SCENARIO = "scenarios/policies/custom-plugin.yaml"


def median_ttft_by_tenant(requests_csv: Path) -> dict[str, float]:
    with requests_csv.open() as f:
        rows = list(csv.DictReader(f))
    tenants = sorted({r["tenant"] for r in rows})
    return {
        t: statistics.median(float(r["ttft_s"]) for r in rows if r["tenant"] == t) for t in tenants
    }


def test_a_plugin_scheduler_from_a_file_runs_through_pagesim(tmp_path, monkeypatch):
    # The plug-in path in the scenario is relative to the scenario file, so the run works
    # from any working directory.
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    scenario = str(REPO / PLUGIN_SCENARIO)
    assert main(["run", scenario, "--out", str(out), "--quiet", "--no-report"]) == 0
    ttft = median_ttft_by_tenant(out / "requests.csv")
    assert set(ttft) == {"0", "1", "2"}
    # Tenant 0 is premium: it jumps the queue, so it waits far less than the others.
    assert ttft["0"] * 5 < min(ttft["1"], ttft["2"])


def test_a_plugin_that_cannot_be_loaded_is_a_one_line_error(tmp_path, capsys):
    scenario = tmp_path / "plugin.yaml"
    scenario.write_text("scheduler: {policy: missing_policy.py:Nope}\n")
    assert main(["run", str(scenario), "--out", str(tmp_path / "r"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "scheduler.policy" in err and "missing_policy.py" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_parameters_a_policy_does_not_take_are_a_one_line_error(tmp_path, capsys):
    scenario = tmp_path / "params.yaml"
    scenario.write_text("scheduler: {policy: priority, params: {agin_s: 3}}\n")
    assert main(["run", str(scenario), "--out", str(tmp_path / "r"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "scheduler.params" in err and "agin_s" in err
    assert len(err.strip().splitlines()) == 1


def test_edf_serves_deadlines_in_order_and_lost_causes_last():
    # TTFT SLO 1 s; at t=5 requests that arrived before t=4 have missed their deadline.
    waiting = deque(
        [
            Entry(req(0, 3.0)),  # late: due 4.0
            Entry(req(1, 4.5)),  # due 5.5
            Entry(req(2, 2.0)),  # late: due 3.0
            Entry(req(3, 4.2)),  # due 5.2
            Entry(req(9, 0.0), resumed=True),  # resumed entries keep the front
        ]
    )
    context = PolicyContext.standalone(slo=SLO(ttft_s=1.0, tpot_s=0.1))
    view = View(now=5.0)
    assert ids(make("edf", context).order(waiting, view)) == [9, 3, 1, 2, 0]
    assert ids(make("edf", context, late="keep").order(waiting, view)) == [9, 2, 0, 3, 1]
    with pytest.raises(PolicyError, match="late must be"):
        make("edf", context, late="first")
