"""Prefill/decode hand-offs in the allocator state machine. One allocator plays both
instances, tenant salts keeping their caches apart (the decode side's sequences are under
the drawn salt + :data:`DECODE_SALT`), and the rules drive the peer connector
(backend/connectors/peer.py) as the engine does (sim/engine/disaggregation.py,
planner.load_from_peer, Replica.kv_arrived):

* **hand_off**: a sequence whose prompt is computed finishes on the prefill side; the
  connector says whether its blocks stay held for the reader; the decode side now
  expects the request;
* **start_read**: the decode side allocates the whole prompt with nothing computed past
  its own prefix hit (so nothing past it is offered to lookups), and the connector says
  which blocks the read fills;
* **finish_read**: the executor copies those blocks' KV from the prefill side's table
  (as it was at the hand-off) into the decode side's; the decode side marks the prompt
  computed and passes it to a new sequence id (fork, then free: it joins the running
  list), and the prefill side frees what it held. The decode side's KV read through its
  table must then be its prompt's: exactly what the prefill side wrote;
* **give_up**: a request given up before its read started releases the prefill side's
  blocks through the connector's ``forget``.

After every call the machine's checks cover held and reading sequences too (they hold
blocks), and no prefill-side sequence stays held for a read that will never come.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, multiple, precondition, rule

from backend.connectors.peer import PeerLoad, read_moves
from backend.testing.shadow import SeqRef
from backend.transfer import DEVICE_COPY, GPU, PEER

#: added to a prompt's salt on the decode side: its cache is another instance's
DECODE_SALT = 2
#: hand-offs in flight at once (a few, so that they meet each other's blocks)
MAX_HAND_OFFS = 3


@dataclass
class HandOff:
    """One request between the pools: the prefill side's sequence, its tables at the
    hand-off (what the read copies), whether it is still held, and the decode side's
    sequence and load once the read started."""

    prefill: int
    tokens: list[int]
    salt: int
    tables: list[list[int]]
    held: bool
    decode: int | None = None
    load: PeerLoad | None = None


class HandOffRules:
    """Mixin of the state machine (after Harness): ``hand_offs`` by request id (the
    prefill side's sequence id), ``outside``: their sequences, live in the allocator but
    out of the other rules' reach."""

    seq = Bundle("seq")

    def elsewhere(self, seq: SeqRef) -> bool:
        """Whether ``seq`` is in a hand-off (the other rules leave it alone)."""
        return seq.id in self.outside

    @precondition(lambda self: self.peer is not None)
    @rule(seq=seq)
    def hand_off(self, seq):
        state = self.seqs.get(seq.id)
        if state is None or state.swapped or state.computed < len(state.tokens):
            return
        if len(self.hand_offs) >= MAX_HAND_OFFS:
            return
        tables = self.blocks(seq.id)
        self.peer.send_later(seq.id)
        held = self.peer.request_finished(seq.id)
        self.outside[seq.id] = self.seqs.pop(seq.id)
        if not held:  # the engine frees what the connector does not hold
            self.alloc.free(seq.id)
            self.gone[seq.id] = self.outside.pop(seq.id)
        self.hand_offs[seq.id] = HandOff(seq.id, list(state.tokens), state.salt, tables, held)
        self.peer.expect(seq.id, 0)
        self.count("hand-offs")

    @precondition(lambda self: any(h.decode is None for h in self.hand_offs.values()))
    @rule(target=seq, pick=st.integers(0, MAX_HAND_OFFS - 1))
    def start_read(self, pick):
        """The decode side's sequence (in the bundle, so that the example names it; the
        other rules leave it alone while it reads)."""
        rid, hand_off = self._waiting(pick)
        if len(self.seqs) + len(self.outside) >= 2 * MAX_HAND_OFFS + 4:
            return multiple()
        alloc, did, salt = self.alloc, self.next_id, hand_off.salt + DECODE_SALT
        prompt = hand_off.tokens
        promised = self.query(
            "cached_prefix_tokens", lambda: alloc.cached_prefix_tokens(prompt, salt=salt)
        )
        done, hit = self.attempt(
            "allocate", alloc.allocate, did, prompt, salt=salt, computed_tokens=0
        )
        if not done:
            return multiple()  # (it waits for blocks, still expected)
        self.check_prefix_hit(prompt, salt, hit, promised)
        self.new_seq(prompt, salt, hit)
        self.outside[did] = self.seqs.pop(did)
        self.check_hit_blocks(did, prompt, hit)
        remote = self.peer.remote_tokens(rid, len(prompt), hit)
        assert remote == len(prompt) - hit, (
            f"the peer connector loads {remote} tokens of a {len(prompt)}-token prompt "
            f"after a {hit}-token hit"
        )
        hand_off.decode, hand_off.load = did, self.peer.start_load(rid, hit, len(prompt))
        self.count("reads")
        return SeqRef(did)

    @precondition(lambda self: any(h.load is not None for h in self.hand_offs.values()))
    @rule(target=seq, pick=st.integers(0, MAX_HAND_OFFS - 1))
    def finish_read(self, pick):
        reading = sorted(rid for rid, h in self.hand_offs.items() if h.load is not None)
        rid = reading[pick % len(reading)]
        hand_off = self.hand_offs.pop(rid)
        did, load = hand_off.decode, hand_off.load
        decode = self.outside.pop(did)
        self.seqs[did] = decode
        # The executor performs the connector's moves: the prefill side's device blocks
        # (as its table was at the hand-off) into the decode side's.
        for move in read_moves(load, hand_off.tables[0], self.blocks(did)[0]):
            assert move.route == (PEER, GPU), f"a read {move} is not peer -> gpu"
            self.memory.device[move.dst] = self.memory.device[move.src].copy()
        # The read is the prompt's KV: the decode side marks it computed (and the
        # machine's read-back right after this call says whether it is).
        self.alloc.mark_computed(did, len(decode.tokens))
        decode.computed = len(decode.tokens)
        size = self.alloc.block_size
        for end in range(size, decode.computed + 1, size):
            self.computed.add((decode.salt, tuple(decode.tokens[:end])))
        self._release_prefill(hand_off)
        self.count("reads ended")
        return self._joins_running(did)

    # (only with two waiting: giving up stays rarer than reading)
    @precondition(lambda self: sum(h.decode is None for h in self.hand_offs.values()) >= 2)
    @rule(pick=st.integers(0, MAX_HAND_OFFS - 1))
    def give_up(self, pick):
        """The request is rejected or aborted before its read started: the decode side
        forgets it and says where the blocks held for it are."""
        rid, hand_off = self._waiting(pick)
        source = self.peer.forget(rid)
        del self.hand_offs[rid]
        if source is not None:
            self._release_prefill(hand_off)
        self.count("reads given up")

    def _waiting(self, pick: int) -> tuple[int, HandOff]:
        waiting = sorted(rid for rid, h in self.hand_offs.items() if h.decode is None)
        rid = waiting[pick % len(waiting)]
        return rid, self.hand_offs[rid]

    def _release_prefill(self, hand_off: HandOff) -> None:
        if hand_off.held:
            self.alloc.free(hand_off.prefill)
            self.gone[hand_off.prefill] = self.outside.pop(hand_off.prefill)

    def _joins_running(self, did: int):
        """The decode side's sequence joins the running list under a new id (ids order
        it): forked, then the old id freed; the old id where the fork is refused."""
        if len(self.seqs) + len(self.outside) >= 2 * MAX_HAND_OFFS + 6:
            return SeqRef(did)
        new = self.next_id
        done, moves = self.attempt("fork", self.alloc.fork, did, new)
        if not done:
            return SeqRef(did)
        state = self.seqs[did]
        self.new_seq(state.tokens, state.salt, state.computed)
        self.memory.move(moves, route=DEVICE_COPY, what="fork")
        self.alloc.free(did)
        self.gone[did] = self.seqs.pop(did)
        return SeqRef(new)

    def check_nothing_held_in_vain(self) -> None:
        """Every prefill-side sequence still held belongs to a hand-off in flight."""
        for sid, seq in self.outside.items():
            owner = [h for h in self.hand_offs.values() if sid in (h.prefill, h.decode)]
            assert owner, (
                f"{seq.name} is held for a read that will never come (its request was given "
                "up): its blocks leak"
            )
