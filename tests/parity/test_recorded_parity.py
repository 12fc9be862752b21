"""pagesim's ``vllm-v1`` profile against recorded decisions of vLLM's own V1 scheduler:
every stream recorded for the pinned version is replayed and must match step for step
(scheduled tokens per request, preemptions, admissions and their prefix hits, free
blocks, finishes, step times) and request for request (first-token and finish times).
The records are facts of vLLM, written by bench/parity/record.py (``make parity``);
vLLM itself is not needed here."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from policies.vllm_v1 import VLLM_VERSION
from sim.recorded.parity import compare, read_record, replay

HERE = Path(__file__).resolve().parent
PINNED = sorted((HERE / f"vllm-{VLLM_VERSION}").glob("*.json"))


def test_the_pinned_version_has_its_streams():
    assert len(PINNED) >= 12, f"expected at least 12 recorded streams in vllm-{VLLM_VERSION}"


@pytest.mark.parametrize("path", PINNED, ids=[p.stem for p in PINNED])
def test_vllm_v1_profile_makes_the_recorded_decisions(path):
    record = read_record(path)
    parity = compare(record, replay(record))
    assert parity.first_difference is None, (
        f"{path.name}: {parity.identical} of {parity.steps} steps identical, then "
        f"{parity.first_difference}"
    )
    assert parity.requests_differing == 0, f"{path.name}: request times differ"
    # A plain run (decode stretches fast-forwarded, nothing noted) keeps every time.
    plain = replay(record, notes=False)
    assert compare(record, plain).requests_differing == 0, f"{path.name}: fast-forward differs"


def test_a_changed_decision_is_reported_at_its_step():
    record = read_record(HERE / f"vllm-{VLLM_VERSION}" / "burst_shared_prefix.json")
    replayed = replay(record)
    tampered = copy.deepcopy(record)
    step = tampered["steps"][len(tampered["steps"]) // 2]
    name = next(iter(step["scheduled"]))
    step["scheduled"][name] += 1
    parity = compare(tampered, replayed)
    assert parity.identical == len(tampered["steps"]) // 2
    assert "scheduled: pagesim" in parity.first_difference and name in parity.first_difference


@pytest.mark.parametrize(
    "stream, same",
    [
        ("burst_shared_prefix", True),  # no rule that changed between the versions
        ("kv_pressure_small_budget", False),  # 0.11 admits on the chunk alone
        ("watermark_pressure", False),  # 0.11 has no watermark
        ("mixed_long_short_threshold", False),  # 0.11 caps a lone long prompt too
    ],
)
def test_an_older_vllm_differs_exactly_where_its_rules_do(stream, same):
    """The check is sensitive to the rules themselves: 0.11.0's recordings match the
    0.33.0 profile only on streams that none of the changed rules touch."""
    record = read_record(HERE / "vllm-0.11.0" / f"{stream}.json")
    assert (compare(record, replay(record)).first_difference is None) == same
