"""Engine tests in SimPy's style: a fixed-time executor logs every step, and the tests
assert the whole log (what ran when) as well as each request's recorded times."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from backend.blocks import BlockManager
from backend.contiguous import make_contiguous
from backend.transfer import DEVICE_COPY, SWAP_IN, SWAP_OUT, moved_blocks
from policies.admission import ADMISSION
from policies.batching import BATCHING
from policies.preemption import MODES, VICTIMS
from policies.routing import ROUTERS
from policies.scheduling import SCHEDULERS
from policies.vllm_v1 import VllmV1Rules
from sim.engine import Cluster, EngineConfig, Replica, ReplicaPolicies
from sim.workload.request import Request


class FixedStep:
    """An executor whose every step takes ``seconds``; it logs what each step did."""

    def __init__(self, seconds: float = 1.0):
        self.seconds = seconds
        self.log: list[tuple] = []

    def execute(self, batch):
        prefill = tuple((c.seq_id, c.start, c.num_tokens) for c in batch.prefills)
        moved = moved_blocks(batch.transfers)
        self.log.append(
            (
                prefill,
                batch.decode_seq_ids.tolist(),
                *(moved.get(route, 0) for route in (DEVICE_COPY, SWAP_OUT, SWAP_IN)),
            )
        )
        return self.seconds


class Outputs:
    """Decode tokens distinct per (request, sample) and position, far from prompt ids."""

    def stream_state(self, req_id, sample):
        return req_id * 16 + sample

    def tokens(self, states, positions):
        return (1000 + states * 97 + positions).astype(np.int32)

    def decode_inputs(self, states, generated):
        return self.tokens(states, generated - 1)

    def prompt(self, request):
        return request.prompt


def request(req_id, arrival, prompt_len, output_len, **kw):
    prompt = np.arange(req_id * 100, req_id * 100 + prompt_len, dtype=np.int32)
    return Request(req_id=req_id, arrival_s=arrival, prompt=prompt, output_len=output_len, **kw)


def run(
    requests, allocator, config=None, seconds=1.0, mode="recompute", batching="mixed", until=10_000
):
    """Serve ``requests`` on one replica until ``until``; returns the executor's log, the
    outcomes received, the replica, the step records and the cluster."""
    env = simpy.Environment()
    executor = FixedStep(seconds)
    done, records = Outcomes(), []
    cfg = config or EngineConfig(max_model_len=4096)
    policies = ReplicaPolicies(
        scheduler=SCHEDULERS.get("fcfs")(),
        batching=BATCHING.get(batching)(),
        admission=ADMISSION.get("whole-prompt")(),
        victim=VICTIMS.get("last-arrived")(),
        mode=MODES.get(mode)(),
    )
    replica = Replica(
        env, 0, allocator, executor, policies, cfg, Outputs(), Records(records), done.append
    )
    cluster = Cluster(env, [replica], ROUTERS.get("round-robin")())
    env.process(cluster.arrivals(requests))
    env.run(until=until)
    run.records, run.cluster = records, cluster  # for the tests that read them
    return executor.log, done, replica


class Records:
    """A step sink that keeps the records in a list (one step at a time: FixedStep has
    no decode_steps, so no stretch)."""

    def __init__(self, records: list):
        self.records = records

    def record(self, step, end_s=None):
        self.records.append(step)

    def record_rows(self, rows, ends):
        raise AssertionError("no stretch expected")


class Outcomes(list):
    """The outcomes ``on_done`` received, in order; ``[request]`` looks one up."""

    def of(self, request):
        (outcome,) = [o for o in self if o.request is request]
        return outcome


def test_one_request_prefill_then_decodes():
    alloc = BlockManager(num_blocks=8, block_size=4)
    req = request(0, 0.0, prompt_len=10, output_len=3)
    log, done, _ = run([req], alloc)
    # step 1: whole prompt (first token sampled); steps 2-3 decode tokens 2 and 3
    assert log == [(((0, 0, 10),), [], 0, 0, 0), ((), [0], 0, 0, 0), ((), [0], 0, 0, 0)]
    assert [o.request for o in done] == [req]
    out = done.of(req)
    assert (out.first_scheduled_s, out.first_token_s, out.finish_s) == (0.0, 1.0, 3.0)
    assert out.output_tokens == 3 and out.rejected_reason == "" and out.replica == 0
    assert alloc.usage().used_blocks == 0
    alloc.check_invariants()


def test_chunked_prefill_splits_prompt_under_token_budget():
    alloc = BlockManager(num_blocks=8, block_size=4)
    req = request(0, 0.0, prompt_len=10, output_len=2)
    cfg = EngineConfig(max_num_batched_tokens=4, max_num_seqs=4, max_model_len=64)
    log, done, _ = run([req], alloc, cfg)
    assert [entry[0] for entry in log] == [((0, 0, 4),), ((0, 4, 4),), ((0, 8, 2),), ()]
    assert done.of(req).first_token_s == 3.0 and done.of(req).finish_s == 4.0


def test_decode_and_prefill_share_a_step_under_continuous_batching():
    alloc = BlockManager(num_blocks=16, block_size=4)
    a = request(0, 0.0, prompt_len=4, output_len=3)
    b = request(1, 0.5, prompt_len=4, output_len=2)
    log, done, _ = run([a, b], alloc)
    assert log == [
        (((0, 0, 4),), [], 0, 0, 0),  # t=0: a's prompt
        (((1, 0, 4),), [0], 0, 0, 0),  # t=1: a decodes while b (arrived 0.5) prefills
        ((), [0, 1], 0, 0, 0),  # t=2: both decode; both finish
    ]
    a, b = done.of(a), done.of(b)
    assert (a.finish_s, b.first_token_s, b.finish_s) == (3.0, 2.0, 3.0)


def test_free_list_miss_preempts_last_arrived_and_everyone_finishes():
    # 4 blocks of 2 slots: two requests of 3-token prompts growing to 7 tokens cannot
    # both stay resident; the later one is preempted (recompute) and comes back.
    alloc = BlockManager(num_blocks=4, block_size=2)
    a = request(0, 0.0, prompt_len=3, output_len=5)
    b = request(1, 0.0, prompt_len=3, output_len=5)
    log, done, replica = run([a, b], alloc)
    assert sorted(r.req_id for r in done) == [0, 1]
    a, b = done.of(a), done.of(b)
    assert b.num_preemptions >= 1 and a.num_preemptions == 0
    assert replica.num_preemptions == b.num_preemptions
    assert a.output_tokens == 5 and b.output_tokens == 5
    assert alloc.usage().used_blocks == 0
    alloc.check_invariants()


def test_swap_mode_moves_blocks_out_and_back():
    alloc = BlockManager(num_blocks=4, block_size=2, num_cpu_blocks=8)
    a = request(0, 0.0, prompt_len=3, output_len=5)
    b = request(1, 0.0, prompt_len=3, output_len=5)
    log, done, replica = run([a, b], alloc, mode="swap")
    swapped_out = sum(entry[3] for entry in log)
    swapped_in = sum(entry[4] for entry in log)
    assert replica.num_swaps_out >= 1
    assert swapped_out > 0 and swapped_in == swapped_out
    assert len(done) == 2 and all(r.output_tokens == 5 for r in done)
    alloc.check_invariants()


def test_request_that_can_never_fit_is_rejected_with_reason():
    alloc = BlockManager(num_blocks=4, block_size=2)
    big = request(0, 0.0, prompt_len=20, output_len=2)
    small = request(1, 0.1, prompt_len=2, output_len=2)
    _, done, _ = run([big, small], alloc)
    big, small = done.of(big), done.of(small)
    assert "KV blocks" in big.rejected_reason and np.isnan(big.first_token_s)
    assert big.output_tokens == 0 and np.isnan(big.finish_s)
    assert small.rejected_reason == "" and small.output_tokens == 2
    assert [r.req_id for r in done] == [0, 1]


def test_too_long_for_the_model_is_rejected():
    alloc = BlockManager(num_blocks=64, block_size=2)
    req = request(0, 0.0, prompt_len=30, output_len=10)
    cfg = EngineConfig(max_model_len=32)
    _, done, _ = run([req], alloc, cfg)
    assert "max_model_len" in done.of(req).rejected_reason


def test_parallel_samples_fork_and_copy_on_write():
    alloc = BlockManager(num_blocks=32, block_size=4)
    req = request(0, 0.0, prompt_len=6, output_len=3, n=3)
    log, done, _ = run([req], alloc)
    # The prompt runs once; the two forks share its half-full last block, so the first
    # decode step copies it for two of the three samples.
    assert log[0][0] == ((0, 0, 6),)
    assert log[1][1] == [0, 1, 2] and log[1][2] == 2
    assert [o.request for o in done] == [req] and done.of(req).output_tokens == 9
    assert alloc.usage().used_blocks == 0


def test_prefix_cache_hit_skips_cached_prompt_blocks():
    alloc = BlockManager(num_blocks=32, block_size=4, enable_prefix_caching=True)
    shared = np.arange(500, 508, dtype=np.int32)
    a = Request(0, 0.0, np.concatenate([shared, [1, 2]]).astype(np.int32), 2)
    b = Request(1, 5.0, np.concatenate([shared, [3]]).astype(np.int32), 2)
    log, done, _ = run([a, b], alloc)
    b_prefill = [entry[0] for entry in log if entry[0] and entry[0][0][0] != 0]
    assert b_prefill == [((1, 8, 1),)]  # b (seq 1) starts after its 8 cached tokens
    assert done.of(b).cached_prompt_tokens == 8 and done.of(a).cached_prompt_tokens == 0


@pytest.mark.parametrize("name", ["contiguous-max", "contiguous-pow2", "contiguous-oracle"])
def test_contiguous_baselines_serve_the_same_requests(name):
    alloc = make_contiguous(name, num_slots=64, max_model_len=32)
    reqs = [request(i, 0.1 * i, prompt_len=5 + i, output_len=3 + i) for i in range(4)]
    _, done, _ = run(reqs, alloc, EngineConfig(max_model_len=32))
    assert sorted(r.req_id for r in done) == [0, 1, 2, 3]
    assert all(done.of(r).output_tokens == r.output_len for r in reqs)
    alloc.check_invariants()


def test_no_request_is_scheduled_before_it_arrives():
    # 0.0800746590354181 + (1.9369691586445807 - 0.0800746590354181) rounds one ulp below
    # 1.9369691586445807: the arrival clock must not.
    alloc = BlockManager(num_blocks=8, block_size=4)
    first = request(0, 0.0800746590354181, prompt_len=2, output_len=1)
    second = request(1, 1.9369691586445807, prompt_len=2, output_len=1)
    _, done, _ = run([first, second], alloc)
    assert done.of(second).first_scheduled_s >= second.arrival_s


def test_every_step_is_recorded_and_the_horizon_leaves_outcomes_for_the_rest():
    alloc = BlockManager(num_blocks=8, block_size=4)
    first, late = request(0, 0.0, prompt_len=4, output_len=5), request(1, 50.0, 4, 2)
    _, done, _ = run([first, late], alloc, until=2.5)
    # Two steps ended by t=2.5 (the prompt, one decode); the third is still running.
    shape = [
        (r.time_s, r.batch_size, r.num_prefill_tokens, r.num_decode_tokens) for r in run.records
    ]
    assert shape == [(0.0, 1, 4, 0), (1.0, 1, 0, 1)]
    assert [r.used_blocks for r in run.records] == [1, 2] and run.records[0].queue_len == 0
    assert done == []
    running, never_arrived = run.cluster.unfinished_outcomes("stopped")
    assert (running.request, running.output_tokens, running.first_token_s) == (first, 2, 1.0)
    assert (never_arrived.request, never_arrived.output_tokens) == (late, 0)
    assert running.rejected_reason == never_arrived.rejected_reason == "stopped"
    assert np.isnan(never_arrived.first_scheduled_s) and np.isnan(running.finish_s)


def test_async_scheduling_takes_an_arrival_one_step_later():
    """vLLM's async scheduling plans step k+1 while step k runs: a request arriving during
    a step is first scheduled in the step after the next (here at t=3, not t=2), while an
    idle engine takes an arrival at once (the first request, at t=0)."""
    first, second = request(0, 0.0, 4, 6), request(1, 1.5, 4, 2)
    logs = {}
    for asynchronous in (False, True):
        alloc = BlockManager(num_blocks=16, block_size=4)
        config = EngineConfig(max_model_len=4096, async_scheduling=asynchronous)
        _, done, _ = run([first, second], alloc, config)
        logs[asynchronous] = [done.of(r).first_scheduled_s for r in (first, second)]
        alloc.check_invariants()
    assert logs[False] == [0.0, 2.0]
    assert logs[True] == [0.0, 3.0]


def test_async_scheduling_an_idle_engine_takes_every_arrival_at_once():
    reqs = [request(i, 5.0, 4, 2) for i in range(3)]
    alloc = BlockManager(num_blocks=16, block_size=4)
    _, done, _ = run(reqs, alloc, EngineConfig(max_model_len=4096, async_scheduling=True))
    assert [done.of(r).first_scheduled_s for r in reqs] == [5.0, 5.0, 5.0]


def test_async_frees_lag_holds_a_finished_requests_max_num_seqs_slot():
    """Under vLLM's async rules a request that finished in step k is still in the running
    set when step k+1 is planned (its output is processed after that plan). With
    max_num_seqs 2, A and B running and C waiting: B's last token comes at t=2; the plan
    for the step from t=2 still counts B, so C waits for the plan after it."""
    a, b, c = request(0, 0.0, 4, 6), request(1, 0.0, 4, 2), request(2, 0.0, 4, 2)
    starts = {}
    for lag in (False, True):
        alloc = BlockManager(num_blocks=16, block_size=4)
        config = EngineConfig(
            max_model_len=4096, max_num_seqs=2, async_scheduling=lag, rules=VllmV1Rules()
        )
        _, done, replica = run([a, b, c], alloc, config)
        starts[lag] = done.of(c).first_scheduled_s
        assert replica._state.lagging == []  # every finished sequence freed in the end
        alloc.check_invariants()
    assert starts == {False: 2.0, True: 3.0}


def test_async_frees_lag_with_nothing_else_to_run_plans_again_at_once():
    """A plan that admits nothing only because a finished request still holds its slot
    runs nothing: vLLM then takes the step's output and plans again at once."""
    first, second = request(0, 0.0, 4, 2), request(1, 0.0, 4, 2)
    alloc = BlockManager(num_blocks=16, block_size=4)
    config = EngineConfig(
        max_model_len=4096, max_num_seqs=1, async_scheduling=True, rules=VllmV1Rules()
    )
    _, done, _ = run([first, second], alloc, config)
    assert done.of(second).first_scheduled_s == 2.0
