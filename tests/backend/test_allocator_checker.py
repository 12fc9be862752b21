"""pagesim's allocator state machine (backend.testing) on the shipped allocators, bound
as a user's own pytest suite would bind it, and on deliberately broken block managers
(tests/backend/broken_allocators.py), each of which it must catch with a short example.

The shipped allocators' runs are sized by the Hypothesis profile (tests/conftest.py:
``ci`` quick, ``nightly`` long); the broken ones run through ``check_allocator`` with
a fixed budget (800 examples) and seed, so they are deterministic.
"""

from __future__ import annotations

import functools

import pytest

from backend.blocks import BlockManager
from backend.testing import AllocatorStateMachine, check_allocator, supports_prefix_caching
from backend.testing.factories import SHIPPED
from tests.backend import broken_allocators as broken
from tests.backend import faithful_allocators as faithful

# The suite's longest file: `pytest -m "not slow"` leaves it out while developing; CI and
# `make test` run it (sized by the Hypothesis profile).
pytestmark = pytest.mark.slow

# -- the shipped allocators pass -------------------------------------------------------
TestPaged = AllocatorStateMachine.for_factory(BlockManager).TestCase
TestPagedWithoutPrefixCaching = AllocatorStateMachine.for_factory(
    BlockManager, prefix_caching=False, name="CheckPagedWithoutPrefixCaching"
).TestCase
TestContiguousMax = AllocatorStateMachine.for_factory(SHIPPED["contiguous-max"]).TestCase
TestContiguousPow2 = AllocatorStateMachine.for_factory(SHIPPED["contiguous-pow2"]).TestCase
TestContiguousOracle = AllocatorStateMachine.for_factory(SHIPPED["contiguous-oracle"]).TestCase
# A correct subclass of the shipped manager passes however much of it it overrides
TestOverridesEveryCommand = AllocatorStateMachine.for_factory(
    faithful.OverridesEveryCommand
).TestCase
TestOverridesTheCheckedCommands = AllocatorStateMachine.for_factory(
    faithful.OverridesTheCheckedCommands
).TestCase


def test_capabilities_of_the_shipped_allocators():
    assert supports_prefix_caching(BlockManager)
    contiguous = [
        SHIPPED[name] for name in ("contiguous-max", "contiguous-pow2", "contiguous-oracle")
    ]
    assert not any(supports_prefix_caching(factory) for factory in contiguous)
    built = SHIPPED["contiguous-oracle"](
        num_blocks=4, block_size=2, num_cpu_blocks=1, enable_prefix_caching=False
    )
    assert (built.block_table_layout, built.num_blocks, built.num_cpu_blocks) == ("region", 8, 2)
    assert BlockManager.block_table_layout == "blocks"


def test_check_allocator_counts_what_it_exercised():
    result = check_allocator(BlockManager, examples=30)
    assert result.passed and not result.example and not result.error
    assert result.stats["runs"] >= 30 and result.stats["calls"] > result.stats["runs"]
    assert result.stats["allocations"] > 0 and result.stats["refused calls"] > 0


def test_the_checker_reaches_every_tier_move():
    """The machine draws a CPU tier and a disk tier below it: its examples store, load,
    cascade to the disk and promote a disk hit through the CPU tier, all checked."""
    result = check_allocator(BlockManager, examples=500, seed_value=3)
    assert result.passed, result.error
    moves = ("tier stores", "tier loads", "tier cascades", "tier promotions")
    assert all(result.stats[name] > 0 for name in moves), result.stats


# -- broken allocators fail, each with a short example ----------------------------------
#: class name -> what the reported failure says (the "Unchecked" variants have no
#: check_invariants of their own: only the checker's model can see the bug)
BROKEN = {
    "NoCopyOnWrite": "sharers disagree",  # its own check_invariants
    # the shared block's tokens are miscounted (a slot leaked, or a usage field below 0)
    "UncheckedNoCopyOnWrite": ("token_slots", "token slots", "has a negative field"),
    "LeakyFree": "refcount",
    "UncheckedLeakyFree": "used_blocks is 1; the live sequences' tables hold 0",
    # (a hit on it, or a tier store of it, whichever the example reaches first)
    "FreePublishesUncomputed": "computed",
    "UncheckedFreePublishesUncomputed": "computed",
    "FreeKeepsKeys": "has a key",
    "UncheckedFreeKeepsKeys": "KeyError",  # its evictor is asked for a block it never had
    # (which salt the shrunk example names depends on how far shrinking got)
    "UncheckedSharedAcrossTenants": ": never computed under that salt",
    "CountsRefusedLookups": "changed snapshot()",
    "SwapInSharesUncomputed": "has not computed",
    "SwapOutWithoutRoute": "goes gpu -> gpu, not gpu -> cpu",
    "GroupTableDisagrees": "block_tables gives",
    "ClaimsTwoGroups": "built (), has",
    # (its own check or the checker's model, whichever the example reaches first)
    "WindowReleasesTooEarly": (
        "released a block inside its window",
        "window of the next token",
        "due in a released block",
    ),
    "UncheckedWindowReleasesTooEarly": ("window of the next token", "due in a released block"),
    "TierStoresTwice": "twice",
    "TierLoadsTheWrongBlock": "prefix hit of",
    "TierCascadesTheWrongBlock": "twice in the disk tier",
    "TierLoadsTheWindowOneOff": "prefix hit of",
    "PeerFreesAtFinish": "'s KV through its block table",
    "PeerReadsOneBlockShort": "holds no KV",
    "PeerForgetsTheSource": "held for a read that will never come",
}


@functools.cache
def checked(name: str):
    """check_allocator on the broken class ``name`` (once per session): an allocator, or
    an offload connector (``Tier*``) or a peer connector (``Peer*``) beside the sound
    manager."""
    if name.startswith(("Tier", "Peer")):
        beside = {"connector" if name.startswith("Tier") else "peer": getattr(broken, name)}
        return check_allocator(
            BlockManager, examples=800, seed_value=0, name=f"Check{name}", **beside
        )
    return check_allocator(getattr(broken, name), examples=800, seed_value=0)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_allocator_fails_with_a_short_example(name):
    result = checked(name)
    assert not result.passed
    expected = BROKEN[name] if isinstance(BROKEN[name], tuple) else (BROKEN[name],)
    assert any(text in result.error for text in expected), result.error
    example = result.example
    assert example[0] == f"state = Check{name}()" and example[-1] == "state.teardown()"
    assert example[1].startswith("state.setup(")
    assert len(example) <= 12, "\n".join(example)


def test_the_missing_copy_on_write_example_forks_then_writes_to_a_sharer():
    example = checked("UncheckedNoCopyOnWrite").example
    forks = [i for i, line in enumerate(example) if " = state.fork(parent=" in line]
    assert forks, example
    child = example[forks[0]].split(" = ")[0]
    parent = example[forks[0]].split("parent=")[1].rstrip(")")
    later = example[forks[0] + 1 :]
    assert any(".append" in line and (child in line or parent in line) for line in later), example


def test_the_leak_is_two_calls():
    result = checked("UncheckedLeakyFree")
    assert [line.split("(")[0] for line in result.example[2:]] == [
        "seq_0 = state.allocate",
        "state.free",
        "state.teardown",
    ]


def test_an_unbound_machine_says_so():
    with pytest.raises(AssertionError, match="for_factory"):
        AllocatorStateMachine().build(4, 1, 0, False)


def test_one_list_of_shipped_allocators():
    """check-allocator has a factory for every name a scenario may give, in order."""
    from backend.shipped import SHIPPED_ALLOCATORS

    assert tuple(SHIPPED) == SHIPPED_ALLOCATORS
