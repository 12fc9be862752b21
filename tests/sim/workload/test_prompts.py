"""Prompts built on demand (sim.workload.prompts): the same tokens on every read and in
every process, the sharing the workload describes, and no token array kept per request."""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from sim.config.loader import load_scenario
from sim.run.runner import simulate
from sim.workload.generate import generate_requests
from sim.workload.prompts import PromptBook
from sim.workload.request import Request
from sim.workload.tokens import BlankOutputs, PromptStreams, output_token_ids, stream_id

ROOT = Path(__file__).resolve().parents[3]
# sessions, prefix groups and a Mooncake trace: every kind of prompt the book builds
CASES = {
    "groups+sessions": (
        "scenarios/multi-turn.yaml",
        ["simulation.num_requests=150", "workload.prefix.num_groups=3"],
    ),
    "mooncake": ("scenarios/trace-mooncake.yaml", ["simulation.num_requests=60"]),
}


def requests_of(case: str) -> list[Request]:
    path, overrides = CASES[case]
    scenario = load_scenario(ROOT / path, overrides)
    return generate_requests(scenario, scenario.model, rng=np.random.default_rng(3))


def prompts_digest(case: str) -> str:
    digest = hashlib.sha256()
    for request in requests_of(case):
        digest.update(request.prompt.tobytes())
    return digest.hexdigest()


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_prompt_is_built_afresh_with_the_same_tokens_on_every_read(case):
    for request in requests_of(case):
        first, second = request.prompt, request.prompt
        assert first is not second  # built on demand, not kept
        assert np.array_equal(first, second)
        assert first.dtype == np.int32 and first.shape == (request.prompt_len,)


@pytest.mark.parametrize("case", sorted(CASES))
def test_prompts_are_the_same_in_another_process(case):
    code = (
        "from tests.sim.workload.test_prompts import prompts_digest; "
        f"print(prompts_digest({case!r}))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "7"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == prompts_digest(case)


def test_a_session_turn_starts_with_the_previous_prompt_and_output_and_groups_share():
    requests = requests_of("groups+sessions")
    book = requests[0].source
    previous, first_of_group = {}, {}
    turns = 0
    for request in requests:
        prompt = request.prompt
        if request.turn > 0:
            before = previous[request.session]
            output = output_token_ids(
                book.seed,
                stream_id(before.req_id, 0),
                np.arange(before.output_len),
                book.vocab_size,
            )
            head = np.concatenate([before.prompt, output])
            assert np.array_equal(prompt[: len(head)], head)
            turns += 1
        elif request.prefix_group >= 0:
            group = book.group_prompt(request.prefix_group)
            other = first_of_group.setdefault(request.prefix_group, request)
            assert np.array_equal(prompt[: len(group)], group)
            if other is not request:  # members share the group's tokens and no more
                assert common_prefix(prompt, other.prompt) == len(group)
        previous[request.session] = request
    assert turns > 20 and len(first_of_group) == 3


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


def test_a_given_prompt_is_kept_as_given_and_a_request_needs_one_source():
    tokens = np.arange(5, dtype=np.int32)
    request = Request(0, 0.0, tokens, 3)
    assert request.prompt is tokens and request.prompt_len == 5
    with pytest.raises(ValueError, match="needs a prompt"):
        Request(0, 0.0, None, 3)
    with pytest.raises(ValueError, match="needs a prompt"):
        Request(0, 0.0, tokens, 3, prompt_len=5, source=PromptBook(0, 10, np.ones(1)))
    with pytest.raises(ValueError, match="needs an output_len"):
        Request(0, 0.0, tokens)


@pytest.mark.parametrize("case", sorted(CASES))
def test_replace_keeps_the_prompt(case):
    """sim/live/observed.py records what the client saw with dataclasses.replace."""
    given = Request(4, 0.0, np.arange(5, dtype=np.int32), 3, tenant=2)
    for request in (given, *requests_of(case)[:20]):
        seen = dataclasses.replace(request, arrival_s=9.0, output_len=7)
        assert (seen.arrival_s, seen.output_len) == (9.0, 7)
        assert (seen.req_id, seen.tenant, seen.prompt_len) == (
            request.req_id,
            request.tenant,
            request.prompt_len,
        )
        assert np.array_equal(seen.prompt, request.prompt)


def test_the_book_shares_one_array_per_prefix_group():
    streams = PromptStreams(1, 1000)
    group = streams.group(0, 8)
    book = PromptBook(1, 1000, np.array([2, 3]), group=np.array([0, 0]), group_len=[8])
    a, b = book.prompt(0), book.prompt(1)
    assert np.array_equal(a[:8], group) and np.array_equal(b[:8], group)
    assert np.array_equal(a[8:], streams.own(0, 2)) and np.array_equal(b[8:], streams.own(1, 3))
    assert not book.group_prompt(0).flags.writeable


def test_blank_prompts_are_read_only_zeros_of_the_prompt_length():
    blank = BlankOutputs()
    for length in (3, 40, 7):
        prompt = blank.prompt(Request(0, 0.0, np.ones(length, np.int32), 1))
        assert prompt.shape == (length,) and not prompt.any() and not prompt.flags.writeable


def _reachable_arrays(roots) -> list[np.ndarray]:
    """Every numpy array reachable from ``roots`` through object references (classes,
    modules and functions are not followed: they are shared by everything)."""
    skip = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)
    seen, stack, arrays = set(), list(roots), []
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, skip):
            continue
        seen.add(id(item))
        if isinstance(item, np.ndarray):
            arrays.append(item)
        stack.extend(gc.get_referents(item))
    return arrays


def test_finished_requests_keep_no_token_arrays():
    """After a run with prefix caching (so the engine builds real prompts), sessions,
    prefix groups and preemptions, what the outcomes reach is a few int32 columns per
    request, each group's prompt once and the position steps of the longest prompt (at
    most twice its length, 8 bytes each): nothing that grows with prompt tokens."""
    path, overrides = CASES["groups+sessions"]
    scenario = load_scenario(ROOT / path, [*overrides, "cache.num_blocks=600"])
    result = simulate(scenario)
    outcomes = result.outcomes
    assert sum(o.num_preemptions for o in outcomes) > 0  # recomputes built prompts too
    prompt_tokens = sum(o.request.prompt_len for o in outcomes)
    book = outcomes[0].request.source
    assert all(o.request.source is book for o in outcomes)
    groups = sum(book.group_prompt(group).nbytes for group in range(3))
    steps = 16 * max(o.request.prompt_len for o in outcomes)
    arrays = _reachable_arrays(outcomes)
    assert arrays  # the walk does reach the book's columns
    per_request = (sum(a.nbytes for a in arrays) - groups - steps) / len(outcomes)
    assert per_request <= 4 * 4  # own length, output length, previous turn, group
    assert prompt_tokens > 100 * len(outcomes)  # what keeping prompts would have cost
