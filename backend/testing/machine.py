"""The allocator state machine: the contract of backend/base.py as a Hypothesis
rule-based state machine, run against any :class:`~backend.base.Allocator` that an
:class:`~backend.base.AllocatorFactory` builds.

Each example builds a tiny allocator (4-16 blocks of 1-4 slots, 0-6 CPU blocks, prefix
caching on or off where the allocator supports it) and drives it with random calls on
up to 6 live sequences: allocate (prompts built from a few shared prefixes, under
tenant salts 0 and 1, some with only part of their KV computed), readmit (a live or
freed sequence's tokens again, as a preempted request or a next turn, or under the other
tenant), mark_computed, append, the decode step append_batch, fork, free, swap out and
in (one sequence or a request's two), and misuse (double free, calls on freed or
swapped-out sequences, ids reused while live). After every call it checks:

* ``check_invariants()`` (the allocator's own checks);
* refused calls (OutOfBlocks) and queries change nothing that the interface shows (nor
  ``snapshot()``, if the allocator has one), and each ``can_*`` query agrees with its
  command; misuse raises ValueError or KeyError and changes nothing;
* every live sequence reads back exactly its tokens, and the KV memory an executor would
  hold (shadow.py) read through the sequence's block table is its own: copy-on-write,
  fork, growth and swap moves are complete and in range;
* prefix hits are what ``cached_prefix_tokens`` promised, whole blocks, never the
  prompt's last token, only of KV computed under the same tenant salt, on blocks that
  hold it (none at all without prefix caching);
* a sequence swapped back in holds the positions whose KV it has not computed in blocks
  no other live sequence holds (it computes them in place);
* usage() against the block tables (no leak; the split sums to the pool), the CPU pool's
  free count, the peak; at the end, once everything is freed, the pool is whole again;
* the offload tiers' moves (tiers.py), the device's cached blocks evicted now and then
  before a sequence comes back, so that the tiers serve hits. Hypothesis shrinks a
  failure to a short sequence of calls and prints it."""

from __future__ import annotations

import sys
from functools import partial

import numpy as np
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from backend.base import ONE_GROUP, AllocatorFactory, ReservingAllocator
from backend.capabilities import TrustedAllocate, TrustedAppendBatch
from backend.connectors.offload import OffloadConnector
from backend.connectors.peer import PeerConnector
from backend.testing import checks
from backend.testing.draws import KV_GROUP_LAYOUTS, TOKENS, prompts
from backend.testing.hand_offs import HandOffRules
from backend.testing.harness import (
    STAT_NAMES,
    Harness,
    supports_kv_connector,
    supports_kv_groups,
    supports_prefix_caching,
)
from backend.testing.shadow import SeqRef
from backend.transfer import DEVICE_COPY, SWAP_IN, SWAP_OUT

#: at most this many live sequences (a few, so that calls meet the same ones often)
MAX_LIVE = 6
#: a token no drawn prompt holds (the final whole-pool prompt never hits the cache)
FILLER = 99


def bound_setup(prefix_caching: bool, offload_tier: bool = False, kv_groups: bool = False):
    """The machine's first step: build an allocator (with prefix caching 3 times in 4 if
    ``prefix_caching``, then with an offload tier of 0-24 blocks if ``offload_tier``, and
    below that a disk tier of 0-24; 1 time in 3 with several KV cache groups or sliding
    windows of 1-12 tokens if ``kv_groups``, then without swap space; with an even
    number of CPU blocks, prefill/decode hand-offs, hand_offs.py, where its tables allow
    them)."""

    @initialize(
        num_blocks=st.integers(4, 16),
        block_size=st.integers(1, 4),
        num_cpu_blocks=st.integers(0, 6),
        prefix_caching=st.sampled_from([True, True, True, False] if prefix_caching else [False]),
        num_offload_blocks=st.just(0) | st.integers(1, 24) if offload_tier else st.just(0),
        num_disk_blocks=st.just(0) | st.integers(1, 24) if offload_tier else st.just(0),
        kv_groups=KV_GROUP_LAYOUTS if kv_groups else st.just(()),
    )
    def setup(self, num_blocks, block_size, num_cpu_blocks, prefix_caching, kv_groups, **tiers):
        cpu, disk = (tiers["num_offload_blocks"] if prefix_caching else 0), tiers["num_disk_blocks"]
        cpu = min(cpu, 1 + cpu % 4) if disk else cpu  # it overflows: the disk serves hits
        if kv_groups not in ((), ONE_GROUP):  # (no swap space with groups)
            num_cpu_blocks = 0
        # Hand-offs in about half the runs (an even CPU pool: none, or 2-6 blocks), so
        # that the other rules keep the rest to themselves.
        hand_offs = num_cpu_blocks % 2 == 0
        self.build(
            num_blocks, block_size, num_cpu_blocks, prefix_caching, cpu, disk, kv_groups, hand_offs
        )

    return setup


class AllocatorStateMachine(Harness, HandOffRules, RuleBasedStateMachine):
    """Bind it to an allocator with :meth:`for_factory`; the bound class's ``TestCase``
    is a unittest (and pytest) test case."""

    seq = Bundle("seq")

    @classmethod
    def for_factory(
        cls,
        factory: AllocatorFactory,
        *,
        prefix_caching: bool | None = None,
        name: str = "",
        connector: type[OffloadConnector] = OffloadConnector,
        peer: type[PeerConnector] = PeerConnector,
    ) -> type[AllocatorStateMachine]:
        """A subclass checking the allocators ``factory`` builds, e.g.
        ``TestMine = AllocatorStateMachine.for_factory(MyAllocator).TestCase``.

        ``prefix_caching``: whether to build some with ``enable_prefix_caching=True``
        (default: the factory's ``supports_prefix_caching``, which an Allocator class
        has, else that of an allocator it builds). ``name`` names the class, which the
        printed example calls ``state`` (default ``Check<factory name>``). ``connector``:
        the offload tiers built beside an allocator that takes a KV connector; ``peer``:
        the peer connector of prefill/decode hand-offs (hand_offs.py)."""
        if prefix_caching is None:
            prefix_caching = supports_prefix_caching(factory)
        body = {
            "factory": staticmethod(factory),
            "connector_class": connector,
            "peer_class": peer,
            "stats": dict.fromkeys(STAT_NAMES, 0),
            "setup": bound_setup(
                prefix_caching, supports_kv_connector(factory), supports_kv_groups(factory)
            ),
            "__module__": cls.__module__,
        }
        return type(name or f"Check{getattr(factory, '__name__', 'Allocator')}", (cls,), body)

    # -- allocation ------------------------------------------------------------------------
    @rule(
        target=seq,
        prompt=prompts(11),
        salt=st.integers(0, 1),
        max_new_tokens=st.integers(0, 4),
        computed_tokens=st.none() | st.just(0) | st.integers(1, 8),
    )
    def allocate(self, prompt, salt, max_new_tokens, computed_tokens):
        return self.admit(prompt, salt, max_new_tokens, computed_tokens)

    @rule(
        target=seq,
        seq=seq,
        extra=st.lists(st.integers(0, 3), max_size=3),
        other_tenant=st.booleans(),
        computed_tokens=st.none() | st.just(0) | st.integers(1, 8),
    )
    def readmit(self, seq, extra, other_tenant, computed_tokens):
        """Allocate anew the tokens ``seq`` holds (or held) plus ``extra``, under its salt
        or the other tenant's: a preempted request, a next turn, another tenant's prompt."""
        tokens, salt = self.held(seq.id)
        salt %= 2  # (a decode side's salt: the prompt again, on the prefill side)
        return self.admit(tokens + extra, 1 - salt if other_tenant else salt, 0, computed_tokens)

    def admit(self, prompt, salt, max_new_tokens, computed_tokens):
        """allocate, checked: the new sequence, or multiple() if refused."""
        alloc, sid = self.alloc, self.next_id
        if len(self.seqs) >= MAX_LIVE:
            return multiple()
        lookup = self.seam if self.seam is not None else alloc  # (tiers count beside it)
        promised = self.query(
            "cached_prefix_tokens", lambda: lookup.cached_prefix_tokens(prompt, salt=salt)
        )
        possible = self.query(
            "can_allocate",
            lambda: lookup.can_allocate(prompt, salt=salt, max_new_tokens=max_new_tokens),
        )
        # Every other new sequence goes through the engine's unchecked entry where the
        # allocator has one (same command; chosen by id so that no draw changes).
        if self.seam is not None:  # a connector's blocks are allocated through its seam
            tokens = np.asarray(prompt, dtype=np.int32)
            command = partial(self.seam.allocate, sid, tokens, salt, computed_tokens)
        elif sid % 2 and isinstance(alloc, TrustedAllocate):
            tokens = np.asarray(prompt, dtype=np.int32)
            command = partial(alloc.allocate_trusted, sid, tokens, salt, computed_tokens)
        else:
            options = {"salt": salt, "max_new_tokens": max_new_tokens}
            command = partial(
                alloc.allocate, sid, prompt, computed_tokens=computed_tokens, **options
            )
        done, hit = self.attempt("allocate", command)
        assert done == possible, f"can_allocate said {possible}; allocate {checks.verb(done)}"
        if not done:
            return multiple()
        stores = self.tier_loads()
        self.check_prefix_hit(prompt, salt, hit, promised)
        self.new_seq(prompt, salt, hit)
        self.check_hit_blocks(sid, prompt, hit)
        self.count("prefix hits" if hit else "allocations")
        computed = len(prompt) if computed_tokens is None else computed_tokens
        self.compute_through(sid, max(hit, computed))
        self.tier_stores(stores)
        return SeqRef(sid)

    @rule(seq=seq, num_tokens=st.integers(0, 12))
    def mark_computed(self, seq, num_tokens):
        if seq.id not in self.seqs or self.elsewhere(seq):
            return
        state = self.seqs[seq.id]
        if state.swapped:  # the engine computes only what is on the device
            return
        self.alloc.mark_computed(seq.id, min(num_tokens, len(state.tokens)))
        self.compute_through(seq.id, num_tokens)

    # -- growth ----------------------------------------------------------------------------
    @rule(seq=seq, tokens=TOKENS)
    def append(self, seq, tokens):
        sid, alloc = seq.id, self.alloc
        if self.elsewhere(seq):
            return
        if sid not in self.seqs:
            self.misuse(f"append to freed {seq}", lambda: alloc.append(sid, tokens))
            return
        if self.seqs[sid].swapped:
            self.misuse(f"append to swapped-out {seq}", lambda: alloc.append(sid, tokens))
            return
        possible = self.query("can_append", lambda: alloc.can_append(sid, len(tokens)))
        shared = self.shares_last_block(sid)
        if not shared and alloc.block_table_layout == "blocks":
            # The engine grows a sequence by what the allocator says fits (its sizes).
            held = len(self.seqs[sid].tokens)
            room = alloc.tokens_that_fit(held, alloc.available_blocks())
            fits = alloc.blocks_to_grow(held, held + len(tokens)) <= alloc.available_blocks()
            assert fits == (len(tokens) <= room), "blocks_to_grow and tokens_that_fit disagree"
            assert possible or not fits, f"{len(tokens)} tokens fit ({room} room); can_append no"
        done, moves = self.attempt("append", alloc.append, sid, tokens)
        assert done == possible, f"can_append said {possible}; append {checks.verb(done)}"
        if done:
            self.count("writes to a shared block" if shared else "appends")
            self.grown({sid: tokens}, moves, "append")

    @precondition(lambda self: self.on_device())
    @rule(
        seqs=st.lists(seq, min_size=1, max_size=4),
        tokens=st.lists(st.integers(0, 3), min_size=4, max_size=4),
        trusted=st.booleans(),
    )
    def append_batch(self, seqs, tokens, trusted):
        live = [s.id for s in dict.fromkeys(seqs) if s.id in self.seqs]
        batch = [sid for sid in live if not self.seqs[sid].swapped]
        if not batch:
            return
        alloc, ids = self.alloc, np.array(batch, np.int64)
        needed = self.query("blocks_needed_for_batch", lambda: alloc.blocks_needed_for_batch(ids))
        before, shared = self.pool_use(), any(map(self.shares_last_block, batch))
        token_ids = np.array(tokens[: len(batch)], np.int32)
        # The engine's own entry, where the allocator has one: the same command unchecked.
        unchecked = trusted and isinstance(alloc, TrustedAppendBatch)
        command = alloc.append_batch_trusted if unchecked else alloc.append_batch
        done, moves = self.attempt("append_batch", command, ids, token_ids)
        if not done:
            assert needed > 0, "append_batch refused a batch that needs no block"
            return
        took = self.blocks_taken(before)
        assert took == needed, f"blocks_needed_for_batch said {needed}, append_batch took {took}"
        self.count("decode steps with a write to a shared block" if shared else "decode steps")
        self.grown({s: [t] for s, t in zip(batch, tokens)}, moves, "append_batch")

    def grown(self, appended: dict[int, list[int]], moves, what: str) -> None:
        """The executor performs ``moves``, then computes the appended tokens' KV (an
        append is computed in the step that makes it, with all the sequence held)."""
        self.memory.move(moves, route=DEVICE_COPY, what=what)
        for sid, tokens in appended.items():
            self.seqs[sid].tokens.extend(tokens)
            self.compute_through(sid, len(self.seqs[sid].tokens))

    # -- sharing and release ---------------------------------------------------------------
    @rule(target=seq, parent=seq)
    def fork(self, parent):
        alloc, child, state = self.alloc, self.next_id, self.seqs.get(parent.id)
        if self.elsewhere(parent):
            return multiple()
        if state is None or state.swapped:
            what = "freed" if state is None else "swapped-out"
            self.misuse(f"fork of {what} {parent}", lambda: alloc.fork(parent.id, child))
            return multiple()
        if len(self.seqs) >= MAX_LIVE:
            return multiple()
        done, moves = self.attempt("fork", alloc.fork, parent.id, child)
        if not done:
            return multiple()
        self.new_seq(state.tokens, state.salt, state.computed)
        self.memory.move(moves, route=DEVICE_COPY, what="fork")
        self.count("forks")
        return SeqRef(child)

    @rule(seq=seq)
    def free(self, seq):
        if self.elsewhere(seq):
            return
        if seq.id not in self.seqs:
            self.misuse(f"free of freed {seq}", lambda: self.alloc.free(seq.id))
            return
        self.alloc.free(seq.id)
        self.gone[seq.id] = self.seqs.pop(seq.id)

    @precondition(lambda self: self.tier is not None)
    @rule(target=seq, seq=seq)
    def evict_cached(self, seq):  # a turn ends, the device forgets it, the next one hits tiers
        if self.elsewhere(seq):
            return multiple()
        if seq.id in self.seqs:
            self.free(seq)
        self.alloc.evict(self.alloc.num_blocks)
        return self.readmit(seq, [], False, None)

    # -- swap ------------------------------------------------------------------------------
    @precondition(lambda self: self.on_device())
    @rule(seqs=st.lists(seq, min_size=1, max_size=2))
    def swap_out(self, seqs):
        self.swap(list(dict.fromkeys(s.id for s in seqs if s.id in self.seqs)), out=True)

    @precondition(lambda self: len(self.on_device()) < len(self.seqs))  # one is swapped out
    @rule(seqs=st.lists(seq, min_size=1, max_size=2))
    def swap_in(self, seqs):
        self.swap(list(dict.fromkeys(s.id for s in seqs if s.id in self.seqs)), out=False)

    @rule(seq=seq)
    def swap_out_and_in(self, seq):
        """A request preempted by swap and resumed: out, then straight back in."""
        if seq.id in self.seqs and not self.seqs[seq.id].swapped:
            self.swap([seq.id], out=True)
            if self.seqs[seq.id].swapped:
                self.swap([seq.id], out=False)

    def swap(self, sids: list[int], *, out: bool) -> None:
        """Ask ``can_swap_*`` for the group (as the engine does for a request's samples),
        then swap them one by one: a yes means every command succeeds, and for one
        sequence the answer is exact. A sequence already there is a misuse."""
        if not sids:
            return
        alloc, name = self.alloc, "swap_out" if out else "swap_in"
        ask, command = (
            (alloc.can_swap_out, alloc.swap_out) if out else (alloc.can_swap_in, alloc.swap_in)
        )
        possible = self.query(f"can_{name}", lambda: ask(*sids))
        there = [sid for sid in sids if self.seqs[sid].swapped == out]
        if there:
            seq = self.seqs[there[0]]
            assert not possible, (
                f"can_{name} said yes for {seq.name}, already swapped {'out' if out else 'in'}"
            )
            self.misuse(f"{name} of {seq.name}", lambda: command(there[0]))
            return
        for sid in sids:
            done, moves = self.attempt(name, command, sid)
            if len(sids) == 1:
                assert done == possible, f"can_{name} said {possible}; {name} {checks.verb(done)}"
            else:
                assert done or not possible, f"can_{name} said yes for the group; {name} refused"
            if not done:
                return
            self.memory.move(moves, route=SWAP_OUT if out else SWAP_IN, what=name)
            self.seqs[sid].swapped = out
            if not out:
                self.check_uncomputed_private(sid)
            self.count("swaps out" if out else "swaps in")

    # -- misuse ----------------------------------------------------------------------------
    @rule(seq=seq, call=st.sampled_from(["allocate", "fork"]))
    def reuse_live_id(self, seq, call):
        """Allocating or forking onto the id of a live sequence is a misuse. (Calls on a
        freed sequence reach the other rules, which expect misuse errors for them.)"""
        if seq.id not in self.seqs:
            return
        alloc, sid = self.alloc, seq.id
        command = (
            (lambda: alloc.allocate(sid, [0]))
            if call == "allocate"
            else (lambda: alloc.fork(sid, sid))
        )
        self.misuse(f"{call} onto live {seq}", command)

    # -- after every step ------------------------------------------------------------------
    @invariant()
    def the_contract_holds(self):
        if not hasattr(self, "alloc"):
            return
        self.count("calls")
        self.tier_step_done()
        self.alloc.check_invariants()
        if self.seam is not None:
            self.seam.connector.check_invariants()
        everything = self.everything()
        checks.reads_back(self.alloc, everything)
        blocks = checks.tables(self.alloc, self.memory, everything)
        checks.usage_adds_up(self.alloc, self.memory, everything, blocks, self.caching)
        self.check_nothing_held_in_vain()
        peak = self.alloc.peak_used_blocks
        assert peak >= self.peak, f"peak_used_blocks went down from {self.peak} to {peak}"
        self.peak = peak

    def teardown(self):
        """Free everything: nothing may stay in use and (unless the allocator reserves
        up front) the pool must take a prompt that fills it."""
        if not hasattr(self, "alloc") or sys.exc_info()[1] is not None:
            return  # a step failed: that failure is the one to report
        alloc = self.alloc
        for sid in [*self.seqs, *self.outside]:  # (hand-offs in flight given up)
            alloc.free(sid)
        self.seqs.clear()
        self.outside.clear()
        alloc.check_invariants()
        usage = alloc.usage()
        assert usage.used_blocks == 0 and usage.token_slots == 0, (
            f"with every sequence freed, {usage.used_blocks} blocks and "
            f"{usage.token_slots} token slots are still in use (a leak)"
        )
        assert alloc.num_free_cpu_blocks == alloc.num_cpu_blocks, "CPU blocks leaked"
        if isinstance(alloc, ReservingAllocator):
            return
        whole = [FILLER] * (alloc.num_blocks // alloc.num_kv_groups * alloc.block_size)
        assert alloc.can_allocate(whole), "with every sequence freed, the pool is not whole"
        alloc.allocate(self.next_id, whole)
        alloc.free(self.next_id)
        alloc.check_invariants()
