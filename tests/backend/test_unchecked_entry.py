"""Which allocator entry the engine calls: the unchecked (input-trusting) form of a
command only where no subclass has overridden the checked one below it, so that a
plug-in subclassing the block manager sees every call it overrides."""

from __future__ import annotations

from backend.blocks import BlockManager
from backend.capabilities import (
    UNCHECKED_FORMS,
    Snapshots,
    TrustedAllocate,
    TrustedAppendBatch,
)
from backend.contiguous import MODES, ContiguousAllocator, make_contiguous


class OverridesAllocate(BlockManager):
    def allocate(self, seq_id, token_ids, **kwargs):
        return super().allocate(seq_id, token_ids, **kwargs)


class OverridesTheUncheckedForm(OverridesAllocate):
    def allocate_trusted(self, seq, tokens, salt, computed_tokens=None):
        return super().allocate_trusted(seq, tokens, salt, computed_tokens)


PROTOCOL_OF = {"allocate_trusted": TrustedAllocate, "append_batch_trusted": TrustedAppendBatch}


def unchecked_entry(allocator, unchecked: str, checked: str):
    """The engine's choice: the unchecked form where the allocator declares it."""
    assert UNCHECKED_FORMS[unchecked] == checked
    return getattr(allocator, unchecked) if isinstance(allocator, PROTOCOL_OF[unchecked]) else None


def entry(cls, unchecked="allocate_trusted", checked="allocate"):
    return unchecked_entry(cls(8, 4), unchecked, checked)


def test_the_block_manager_offers_its_unchecked_entries():
    manager = BlockManager(8, 4)
    assert unchecked_entry(manager, "allocate_trusted", "allocate") == manager.allocate_trusted
    got = unchecked_entry(manager, "append_batch_trusted", "append_batch")
    assert got == manager.append_batch_trusted


def test_a_subclass_overriding_the_checked_command_gets_every_call():
    assert entry(OverridesAllocate) is None
    # ...its other commands keep their unchecked form
    assert entry(OverridesAllocate, "append_batch_trusted", "append_batch") is not None


def test_a_subclass_overriding_both_gets_its_own_unchecked_form():
    alloc = OverridesTheUncheckedForm(8, 4)
    got = unchecked_entry(alloc, "allocate_trusted", "allocate")
    assert got is not None and got.__func__ is OverridesTheUncheckedForm.allocate_trusted


def test_an_allocator_without_an_unchecked_form_has_none():
    alloc = ContiguousAllocator(64, mode=next(iter(MODES)), max_model_len=32)
    assert unchecked_entry(alloc, "allocate_trusted", "allocate") is None


class CheckedAllocate:  # a mixin that is no Allocator, listed before the block manager
    def allocate(self, seq_id, token_ids, **kwargs):
        return super().allocate(seq_id, token_ids, **kwargs)


class MixedIn(CheckedAllocate, BlockManager):
    pass


def test_a_mixin_overriding_the_checked_command_above_the_manager_gets_every_call():
    assert entry(MixedIn) is None
    assert entry(MixedIn, "append_batch_trusted", "append_batch") is not None


def test_the_snapshot_capability_is_declared_by_having_the_method():
    """The checker compares snapshots only of allocators that declare them."""
    assert isinstance(BlockManager(4, 2), Snapshots)
    assert not isinstance(make_contiguous("contiguous-max", 8, max_model_len=4), Snapshots)
