"""Batching modes: each mode's defining property, checked on the log of every step of a
run (which prefill chunks and which decodes each step held) and on the requests' times.
The liveness and conservation property tests (test_liveness.py) draw every mode too."""

from __future__ import annotations

import numpy as np
import pytest

from policies.batching import BATCHING
from sim.config.loader import validate_scenario
from sim.run.runner import simulate

STEP_S = 0.01


class Recorder:
    """An executor taking STEP_S per step that keeps (chunks, decode ids) of each step."""

    def __init__(self):
        self.steps: list[tuple[tuple, tuple]] = []

    def execute(self, batch) -> float:
        chunks = tuple((c.seq_id, c.start, c.num_tokens) for c in batch.prefills)
        self.steps.append((chunks, tuple(batch.decode_seq_ids.tolist())))
        return STEP_S if batch.batch_size else 0.0


def run(batching: str, *, rate: float = 200.0, num_requests: int = 300, **scheduler):
    """A one-replica run; returns the result and (start, chunks, decode ids) per step."""
    raw = {
        "model": "tiny",
        "cache": {"block_size": 16, "num_blocks": 2048},
        "scheduler": {
            "batching": batching,
            "max_num_seqs": 16,
            "max_num_batched_tokens": 256,
            **scheduler,
        },
        "workload": {
            "arrival": {"kind": "poisson", "rate_rps": rate},
            "input": {"kind": "uniform", "min": 8, "max": 200},
            "output": {"kind": "uniform", "min": 2, "max": 40},
        },
        "simulation": {"num_requests": num_requests, "seed": 7},
    }
    recorder = Recorder()
    result = simulate(validate_scenario(raw), executor_factory=lambda *_: recorder)
    assert all(not r.rejected_reason for r in result.outcomes)
    assert all(not np.isnan(r.finish_s) for r in result.outcomes)
    starts = result.steps.column("time_s").tolist()  # the step log keeps the same order
    return result, [(start, *step) for start, step in zip(starts, recorder.steps, strict=True)]


def test_every_mode_is_registered():
    assert BATCHING.names() == ["decode-first", "mixed", "prefill-first", "static", "vllm-v1"]


def test_mixed_steps_hold_prefills_and_decodes_together():
    _, steps = run("mixed")
    assert any(chunks and decodes for _, chunks, decodes in steps)
    # and chunked prefill cuts prompts longer than what the decodes leave of the budget
    assert any(start > 0 for _, chunks, _ in steps for _, start, _ in chunks)


def test_prefill_first_never_mixes_and_runs_prompts_first():
    result, steps = run("prefill-first")
    assert all(not (chunks and decodes) for _, chunks, decodes in steps)
    assert any(chunks for _, chunks, _ in steps) and any(decodes for _, _, decodes in steps)
    # Admitted prompts run first: with slots, memory and budget to spare, a request's
    # prompt runs in the first step that starts after it arrived.
    quiet, quiet_steps = run("prefill-first", rate=5.0, num_requests=40)
    starts = np.array([start for start, _, _ in quiet_steps])
    for request in quiet.outcomes:
        assert request.first_scheduled_s == pytest.approx(starts[starts >= request.arrival_s][0])
    assert result.summary["num_finished"] == 300


def test_decode_first_runs_every_decode_and_never_chunks():
    result, steps = run("decode-first")
    prompt_len = {}
    for _, chunks, _ in steps:
        for seq_id, start, num_tokens in chunks:
            assert start == 0, "a prompt was cut into chunks"
            prompt_len[seq_id] = num_tokens
    # every sequence decodes in every step from its prefill until it finishes: its decode
    # steps are consecutive
    seen: dict[int, list[int]] = {}
    for index, (_, _, decodes) in enumerate(steps):
        for seq_id in decodes:
            seen.setdefault(seq_id, []).append(index)
    for seq_id, indices in seen.items():
        assert indices == list(range(indices[0], indices[0] + len(indices))), seq_id
    assert sorted(prompt_len.values()) == sorted(r.prompt_len for r in result.outcomes)


def test_static_batches_admit_nothing_while_a_batch_runs():
    result, _ = run("static")
    done = sorted(result.outcomes, key=lambda r: r.first_scheduled_s)
    batches: list[list] = []
    for request in done:
        if batches and request.first_scheduled_s == batches[-1][0].first_scheduled_s:
            batches[-1].append(request)
        else:
            batches.append([request])
    assert len(batches) > 1 and max(len(b) for b in batches) > 1
    for earlier, later in zip(batches, batches[1:]):
        assert max(r.finish_s for r in earlier) <= later[0].first_scheduled_s
    # while a batch runs the queue is held back by the mode, which the limiter names
    limits = result.steps.column("limit")
    assert (limits == 4).any()  # Limit.POLICY


@pytest.mark.parametrize("batching", ["mixed", "prefill-first", "decode-first", "static"])
def test_each_mode_is_deterministic(batching):
    first, _ = run(batching, num_requests=60)
    second, _ = run(batching, num_requests=60)
    assert [r.finish_s for r in first.outcomes] == [r.finish_s for r in second.outcomes]


def test_an_unknown_mode_is_a_one_line_error():
    with pytest.raises(ValueError, match="unknown batching policy 'prefil-first'.*did you mean"):
        validate_scenario({"model": "tiny", "scheduler": {"batching": "prefil-first"}})
