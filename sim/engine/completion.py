"""Applying a step whose time has passed: decodes gain their token, prompts that ran
their last chunk sample their first one (and fork the request's other samples), and
finished samples free their blocks.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from backend.base import OutOfBlocks
from policies.context import ServedTokens
from sim.engine.executor import TokenSource
from sim.engine.gaps import TokenGaps
from sim.engine.memory import Memory
from sim.engine.replica_state import PrefillSeq, StepPlan
from sim.engine.state import ReplicaState


class Completion:
    """Applies finished steps to one replica. Mutates the state and the allocator, and
    calls ``finish(req_id, now)`` when a request's last sample is done."""

    def __init__(
        self,
        state: ReplicaState,
        memory: Memory,
        outputs: TokenSource,
        finish: Callable[[int, float], None],
        served_tokens: ServedTokens | None,
        *,
        lag_frees: bool = False,
    ):
        self.state = state
        self.alloc = state.alloc
        self.memory = memory
        self.outputs = outputs
        self.finish = finish
        # Tokens computed per tenant, kept only for policies that ask (fair share).
        self.served = served_tokens
        self.gaps = TokenGaps()
        # vLLM's async scheduling plans the next step before this one's output is in:
        # a finished sequence stays in its running set, blocks and max_num_seqs slot,
        # until after that plan (ReplicaState.lagging).
        self.lag_frees = lag_frees

    def release(self, seq_id: int) -> None:
        """A finished sequence's blocks go back to the pool (now, or after the next plan
        when frees lag)."""
        if self.lag_frees:
            self.state.lagging.append(seq_id)
        else:
            self.alloc.free(seq_id)

    def release_or_hold(self, seq_id: int, req_id: int) -> None:
        """``release`` a finished prompt's sequence, unless a decode instance is still to
        read its KV: then it stays held for the reader (``state.held_for_peer``)."""
        peer = self.state.peer
        if peer is not None and peer.request_finished(req_id):
            self.state.held_for_peer[req_id] = seq_id
        else:
            self.release(seq_id)

    def release_lagging(self) -> None:
        """Free the sequences that finished before the step just planned."""
        for seq_id in self.state.lagging:
            self.alloc.free(seq_id)
        self.state.lagging.clear()
        for seq_id in self.state.lagging_held:
            self.alloc.free(seq_id)
        self.state.lagging_held.clear()

    def apply(self, plan: StepPlan, now: float) -> None:
        """Apply the step that just ended at ``now`` (the replica's next step index)."""
        step = self.gaps.step_ended(now)
        if self.served is not None:
            self.count_service(plan, self.served)
        self.apply_decodes(plan, now, step)
        new_rows: list[tuple[int, ...]] = []
        for seq, take in plan.chunks:
            seq.computed += take
            if seq.computed == seq.tokens.shape[0]:
                self.complete_prefill(seq, now, step, new_rows)
        self.state.decodes.extend(new_rows)

    def count_service(self, plan: StepPlan, served: ServedTokens) -> None:
        served.add_each(self.state.decodes.tenant[: plan.decode_rows])
        for seq, take in plan.chunks:
            served.add(seq.request.tenant, take)

    def apply_decodes(self, plan: StepPlan, now: float, step: int) -> None:
        rows = plan.decode_rows
        if not rows:
            return
        d = self.state.decodes
        generated, token_step = d.generated[:rows], d.token_step[:rows]
        np.add(generated, 1, out=generated)
        self.gaps.tokens(token_step, step)
        token_step.fill(step)
        done = generated >= d.target[:rows]
        # count_nonzero is a plain C call; ``done.any()`` goes through a Python wrapper,
        # and most steps finish nothing.
        if not np.count_nonzero(done):
            return
        if rows < len(d):  # rows joined by this step's prefills are not done
            done = np.concatenate((done, np.zeros(len(d) - rows, dtype=bool)))
        finished = d.take(done)
        for seq_id, req_id in zip(finished["seq_id"].tolist(), finished["req_id"].tolist()):
            self.release(seq_id)
            self.sample_done(req_id, now)

    def complete_prefill(self, seq: PrefillSeq, now: float, step: int, new_rows: list) -> None:
        """The prompt's last chunk ran: its logits gave one more token."""
        self.state.prefilling.remove(seq)
        if seq.token_step >= 0:  # a re-prefill after recompute: a gap since its last token
            self.gaps.token_after(seq.token_step, step)
        request = seq.request
        progress = self.state.in_flight[request.req_id]
        if math.isnan(progress.first_token_s):
            progress.first_token_s = now
        generated = seq.generated + 1
        samples = [seq.sample] + [seq.sample + 1 + i for i in range(seq.fork_children)]
        if generated >= request.output_len:
            # Every sample's only token came from these logits: nothing left to fork.
            self.release_or_hold(seq.seq_id, request.req_id)
            for _ in samples:
                self.sample_done(request.req_id, now)
            return
        context = seq.tokens.shape[0]
        for sample in samples:
            seq_id = seq.seq_id if sample == seq.sample else self.fork(seq, sample, step)
            if seq_id is None:
                continue  # could not fork: that sample was re-queued for recompute
            stream = self.outputs.stream_state(request.req_id, sample)
            new_rows.append(
                (
                    seq_id,
                    request.req_id,
                    sample,
                    stream,
                    generated,
                    request.output_len,
                    context,
                    request.tenant,
                    step,
                )
            )

    def fork(self, parent: PrefillSeq, sample: int, step: int) -> int | None:
        state = self.state
        child = state.next_seq_id
        state.next_seq_id += 1
        try:
            # Paged forks share blocks (copy-on-write later). A contiguous baseline copies
            # the region; its moves are charged to nothing, a simplification.
            self.alloc.fork(parent.seq_id, child)
        except OutOfBlocks:
            generated = parent.generated + 1
            entry = self.memory.recompute_entry(parent.request, sample, generated, step)
            state.waiting.appendleft(entry)
            return None
        return child

    def sample_done(self, req_id: int, now: float) -> None:
        progress = self.state.in_flight[req_id]
        progress.samples_left -= 1
        if progress.samples_left == 0:
            self.finish(req_id, now)
