"""Prefill and decode pools from a scenario (routing.disaggregation): each prompt is
computed on a prefill instance, its KV read over the peer link by a decode instance that
computes only the last prompt token, the prefill's blocks held until then; decode-side
pressure queues the reads; the decider keeps short uncached prompts off the prefill pool."""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy

from sim.config.errors import ScenarioError
from sim.config.loader import validate_scenario
from sim.engine.records import RequestOutcome
from sim.output.steplog import StepLog
from sim.run.build import build_executor
from sim.run.runner import _build_cluster, simulate
from sim.workload.generate import generate_requests

BLOCK_BYTES = 16 * 128 * 1024  # llama-3-8b, bf16: 128 KiB a token


def scenario(split=None, **sections):
    raw = {
        "model": "llama-3-8b",
        "hardware": "h100-sxm",
        "cache": {"prefix_caching": True},
        "scheduler": {"engine": "vllm-v1"},
        "routing": {
            "disaggregation": split
            or {"prefill": {"replicas": 1}, "decode": {"replicas": 2}, "link": "network"}
        },
        "workload": {
            "arrival": {"kind": "poisson", "rate_rps": 8},
            "input": {"kind": "uniform", "min": 200, "max": 3000},
            "output": {"kind": "uniform", "min": 20, "max": 300},
        },
        "simulation": {"num_requests": 200, "seed": 3},
    }
    raw.update(sections)
    return validate_scenario(raw)


def run_cluster(s, fast_forward=True):
    """Simulate ``s`` and return the outcomes, the step log and the cluster (its
    replicas, link and hand-offs as the run left them)."""
    requests = generate_requests(s, s.model, rng=np.random.default_rng(s.simulation.seed))
    env, steps, done = simpy.Environment(), StepLog(), {}

    def on_done(outcome: RequestOutcome) -> None:
        done[outcome.req_id] = outcome

    cluster = _build_cluster(s, requests, env, steps, on_done, build_executor, fast_forward)
    env.process(cluster.arrivals(requests))
    env.run(until=s.simulation.max_sim_time_s)
    return [done[r.req_id] for r in requests], steps, cluster


def test_each_prompt_is_prefilled_then_read_and_nothing_is_left_held():
    outcomes, steps, cluster = run_cluster(scenario())
    assert all(o.finished for o in outcomes)
    assert len(cluster.hand_offs) == len(outcomes)
    for o in outcomes:
        h = cluster.hand_offs[o.req_id]
        assert h.prefill == 0 and h.decode in (1, 2) and o.replica == h.decode
        # The decode side read every block after its own prefix hit, the partial last one too.
        assert h.nbytes % BLOCK_BYTES == 0
        assert h.nbytes <= math.ceil(o.prompt_len / 16) * BLOCK_BYTES
        assert (
            o.arrival_s
            <= h.prefill_started_s
            < h.prefill_done_s
            <= h.transfer_start_s
            < h.transfer_end_s
            < o.first_token_s
        )
        assert o.first_scheduled_s == h.prefill_started_s  # the queue is the prefill's
    assert cluster.link.bytes_moved == pytest.approx(
        sum(h.nbytes for h in cluster.hand_offs.values())
    )
    for replica in cluster.replicas:  # every held or loading block went back
        assert not replica.state.held_for_peer and not replica.state.loading
        assert replica.alloc.usage().used_blocks == 0
    prefill_rows = steps.column("replica") == 0
    assert (
        steps.column("num_decode_tokens")[prefill_rows].sum() == 0
    )  # the prefill pool only prefills


def test_the_decode_instance_computes_only_the_last_prompt_token():
    one = scenario(simulation={"num_requests": 1, "seed": 3})
    outcomes, steps, cluster = run_cluster(one)
    replica, prefill = steps.column("replica"), steps.column("num_prefill_tokens")
    assert prefill[replica == 0].sum() == outcomes[0].prompt_len
    decode_rows = np.flatnonzero(replica == cluster.hand_offs[0].decode)
    assert prefill[decode_rows[0]] == 1 and prefill[decode_rows].sum() == 1


def test_a_small_decode_pool_queues_reads_and_preempts_but_serves_everyone():
    split = {
        "prefill": {"replicas": 2},
        "decode": {"replicas": 1, "cache": {"num_blocks": 600}},
    }
    s = scenario(
        split,
        workload={
            **scenario().model_dump()["workload"],
            "arrival": {"kind": "poisson", "rate_rps": 20},
        },
    )
    outcomes, _, cluster = run_cluster(s)
    assert all(o.finished for o in outcomes)
    assert sum(o.num_preemptions for o in outcomes) > 0
    waits = [h.transfer_start_s - h.prefill_done_s for h in cluster.hand_offs.values()]
    assert max(waits) > 1.0  # reads waited for the decode pool's blocks
    for replica in cluster.replicas:
        assert replica.alloc.usage().used_blocks == 0


def test_a_request_the_decode_pool_can_never_hold_is_rejected_before_any_prefill():
    split = {"prefill": {"replicas": 1}, "decode": {"replicas": 1, "cache": {"num_blocks": 100}}}
    outcomes, steps, cluster = run_cluster(
        scenario(split, simulation={"num_requests": 30, "seed": 3})
    )
    too_big = [o for o in outcomes if o.prompt_len + o.output_len > 99 * 16]
    assert too_big and all("the pool has 99" in o.rejected_reason for o in too_big)
    assert all(o.req_id not in cluster.hand_offs for o in too_big)
    assert steps.column("num_prefill_tokens")[steps.column("replica") == 0].sum() == sum(
        o.prompt_len for o in outcomes if o.finished
    )


def test_the_prefix_aware_decider_keeps_short_uncached_prompts_on_the_decode_pool():
    base = {"prefill": {"replicas": 1}, "decode": {"replicas": 1}, "decider": "prefix-aware"}
    everything, _, all_split = run_cluster(scenario({**base, "threshold": 0}))
    some, _, part_split = run_cluster(scenario({**base, "threshold": 1500}))
    assert len(all_split.hand_offs) == len(everything)
    handed = set(part_split.hand_offs)
    assert 0 < len(handed) < len(some)
    for o in some:
        assert (o.req_id in handed) == (o.prompt_len > 1500)  # (no prefix is shared)
        assert o.finished


def test_both_paths_of_the_engine_give_the_same_outcomes():
    s = scenario(simulation={"num_requests": 120, "seed": 5})
    fast, _, _ = run_cluster(s)
    slow, _, _ = run_cluster(s, fast_forward=False)
    assert [comparable(o) for o in fast] == [comparable(o) for o in slow]


def comparable(outcome: RequestOutcome) -> tuple:
    """An outcome's fields with NaN as None (NaN != NaN) and numpy floats as floats."""
    return tuple(
        None if isinstance(v, float) and math.isnan(v) else v
        for v in (float(x) if isinstance(x, np.floating) else x for x in outcome[1:])
    )


def test_the_summary_says_what_crossed_the_link():
    result = simulate(scenario(simulation={"num_requests": 80, "seed": 3}))
    split = result.summary["disaggregation"]
    assert split["prefill_instances"] == 1 and split["decode_instances"] == 2
    assert split["hand_offs"] == 80 and split["bytes_moved"] > 0
    assert 0 < split["link_busy_fraction"] < 1
    assert split["transfer_slowdown"]["p50"] >= 1 - 1e-9
    assert result.summary["num_replicas"] == 3
    assert [r["num_finished"] for r in result.summary["per_replica"]][0] == 0


@pytest.mark.parametrize(
    ("split", "extra", "message"),
    [
        ({"prefill": {"replicas": 0}}, {}, "routing.disaggregation.prefill.replicas"),
        ({"decider": "always", "threshold": 5}, {}, "only with decider: prefix-aware"),
        ({"link": "carrier-pigeon"}, {}, "routing.disaggregation.link"),
        ({"decode": {"router": "nope"}}, {}, "nope"),
        ({"decode": {"cache": {"num_blocks": 0}}}, {}, "routing.disaggregation.decode"),
        ({}, {"replicas": 2}, "routing.replicas: set it per pool"),
    ],
)
def test_bad_pool_settings_are_one_line(split, extra, message):
    raw_split = {"prefill": {"replicas": 1}, "decode": {"replicas": 1}, **split}
    with pytest.raises(ScenarioError) as err:
        scenario(routing={"disaggregation": raw_split, **extra})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_run_folder_splits_each_ttft_and_the_trace_shows_the_link(tmp_path):
    import csv
    import json

    from sim.cli import main

    scenario_path = tmp_path / "pd.yaml"
    raw = scenario(simulation={"num_requests": 60, "seed": 3}).model_dump(mode="json")
    scenario_path.write_text(json.dumps(raw))  # (YAML reads JSON)
    out = tmp_path / "run"
    args = ["run", str(scenario_path), "--out", str(out), "--quiet", "--no-report"]
    assert main([*args, "--export-trace", "json"]) == 0
    rows = list(csv.DictReader((out / "hand_offs.csv").open()))
    requests = {r["req_id"]: r for r in csv.DictReader((out / "requests.csv").open())}
    assert len(rows) == 60
    for row in rows:
        parts = [float(row[k]) for k in ("queue_s", "prefill_s", "transfer_wait_s", "transfer_s")]
        assert min(parts) >= 0
        ttft = float(requests[row["req_id"]]["ttft_s"])
        assert sum(parts) < ttft  # the decode instance's first step comes after them
        assert float(row["transfer_s"]) >= float(row["transfer_alone_s"]) * (1 - 1e-9)
    events = json.loads((out / "trace.json").read_text())["traceEvents"]
    link = next(e["pid"] for e in events if e.get("args", {}).get("name") == "peer link")
    reads = [e for e in events if e["pid"] == link and e["ph"] == "X"]
    assert len(reads) == 60 and all(e["dur"] > 0 for e in reads)


def test_clients_giving_up_anywhere_on_the_way_leave_nothing_held():
    """Timeouts while queued for the prefill, prefilling, held, queued for the decode
    pool, reading and decoding: every block of both pools comes back, and the two paths
    of the engine agree."""
    split = {
        "prefill": {"replicas": 1, "scheduler": {"max_num_batched_tokens": 256}},
        "decode": {"replicas": 1, "cache": {"num_blocks": 500}},
    }
    workload = {**scenario().model_dump()["workload"], "request_timeout_s": 1.5}
    workload["arrival"] = {"kind": "poisson", "rate_rps": 30}
    s = scenario(split, workload=workload, simulation={"num_requests": 200, "seed": 4})
    outcomes, _, cluster = run_cluster(s)
    assert any(o.finished for o in outcomes)
    given_up = {
        "in the prefill pool": [
            o
            for o in outcomes
            if o.rejected_reason == "prefill pool: timed out: the client gave up after 1.5 s"
        ],
        "before its read": [
            o
            for o in outcomes
            if o.req_id in cluster.hand_offs
            and math.isnan(cluster.hand_offs[o.req_id].transfer_start_s)
        ],
        "while read or after": [
            o
            for o in outcomes
            if o.rejected_reason
            and o.req_id in cluster.hand_offs
            and not math.isnan(cluster.hand_offs[o.req_id].transfer_start_s)
        ],
    }
    for stage, hit in given_up.items():
        assert hit, f"no client gave up {stage}"
        assert all(
            o.rejected_reason.endswith("timed out: the client gave up after 1.5 s")
            or o.rejected_reason.startswith("timed out")
            for o in hit
        )
    for replica in cluster.replicas:
        state = replica.state
        assert not (state.held_for_peer or state.loading or state.read_for_nobody)
        assert replica.alloc.usage().used_blocks == 0
    slow, _, _ = run_cluster(s, fast_forward=False)
    assert [comparable(o) for o in outcomes] == [comparable(o) for o in slow]
