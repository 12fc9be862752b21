"""Memory pressure on one replica: preemption (by recompute or swap) when the free list
runs dry, and swapped requests coming back.

Recompute frees a victim's blocks and re-queues it at the front, to be re-prefilled from
prompt + the tokens generated so far; swap copies its blocks to the CPU pool (falling
back to recompute when the CPU pool is full) and brings them back, in order, before any
new request is admitted.
"""

from __future__ import annotations

import numpy as np

from sim.engine.config import EngineConfig, ReplicaPolicies
from sim.engine.executor import TokenSource
from sim.engine.policy_guard import PolicyFailure, brief
from sim.engine.replica_state import Moves, PrefillSeq, SwappedRequest, WaitingEntry, seq_ids
from sim.engine.state import ReplicaState
from sim.engine.view import EngineView
from sim.workload.request import Request

#: Detached sequences: the prefills, and the decode rows as ``DecodeSet.take`` gives them.
Detached = tuple[list[PrefillSeq], dict[str, np.ndarray]]


class Memory:
    """Preemption and swap for one replica. Mutates the state's queues and running set
    and the allocator; the victim policy picks and the preemption mode chooses swap or
    recompute, both reading a view."""

    def __init__(
        self,
        state: ReplicaState,
        config: EngineConfig,
        policies: ReplicaPolicies,
        outputs: TokenSource,
        view: EngineView,
    ):
        self.state = state
        self.alloc = state.alloc
        self.cfg = config
        self.victims = policies.victim
        self.mode = policies.mode
        self.outputs = outputs
        self.view = view

    def make_room(self, moves: Moves | None) -> None:
        """Free device memory by one preemption (the one place preemptions are counted).

        The victim request is swapped out when the mode is swap, ``moves`` can carry the
        copies (a step is being planned) and the CPU pool has room; otherwise its
        sequences are recomputed. When a single request holds all the memory, only its
        newest sequence is recomputed: swapping or recomputing the whole request would
        bring it back to the same state (a livelock), while its other samples can finish
        with the memory they hold."""
        state = self.state
        state.num_preemptions += 1
        running = state.running_requests()
        if len(running) == 1:
            (request,) = running
            if len(state.seq_ids_of(request)) > 1:
                state.in_flight[request.req_id].preempted(self.view.now)
                self.release(request, *self.detach_newest(request))
                return
        view = self.view.frozen()
        candidates = tuple(running)
        victim = self.victims.pick(candidates, view)
        if not any(victim is request for request in candidates):
            problem = f"returned {brief(victim)}, which is not one of the running requests"
            raise PolicyFailure("preemption.victim", "pick()", problem)
        state.in_flight[victim.req_id].preempted(self.view.now)
        if self.cfg.rules.fan_out_samples and len(state.seq_ids_of(victim)) > 1:
            # Each sample is a request of its own (vLLM V1): only the newest one goes.
            self.release(victim, *self.detach_newest(victim))
            return
        swap = moves is not None and self.swap(victim, view)
        if not (swap and self.try_swap_out(victim, moves)):
            self.release(victim, *self.detach(victim))

    def swap(self, victim: Request, view: EngineView) -> bool:
        answer = self.mode.swap(victim, view)
        if not isinstance(answer, bool):
            problem = f"returned {brief(answer)} (expected True or False)"
            raise PolicyFailure("preemption.mode", "swap()", problem)
        return answer

    def detach(self, victim: Request) -> Detached:
        """Take ``victim``'s sequences out of the running set (allocator untouched)."""
        state = self.state
        prefills = [s for s in state.prefilling if s.request is victim]
        state.prefilling = [s for s in state.prefilling if s.request is not victim]
        return prefills, state.decodes.take(state.decodes.req_id == victim.req_id)

    def detach_newest(self, request: Request) -> Detached:
        """Take ``request``'s newest sequence out of the running set (its others stay)."""
        d = self.state.decodes
        rows = d.req_id == request.req_id
        if rows.any():
            return [], d.take(d.seq_id == d.seq_id[rows].max())
        newest = next(s for s in reversed(self.state.prefilling) if s.request is request)
        self.state.prefilling.remove(newest)
        return [newest], d.take(np.zeros(len(d), dtype=bool))

    def release(self, request: Request, prefills, decodes) -> None:
        """Free detached sequences (on the device or swapped out) and re-queue them."""
        if len(decodes["seq_id"]):
            ids = decodes["seq_id"].tolist()
            self.cfg.rules.decodes_preempted(self.alloc, ids, self.cfg.async_scheduling)
        for seq_id in seq_ids(prefills, decodes):
            self.alloc.free(seq_id)
        self.requeue_for_recompute(request, prefills, decodes)

    def try_swap_out(self, victim: Request, moves: Moves) -> bool:
        """Swap every sequence of ``victim`` to the CPU pool; False (nothing changed) when
        the pool has no room for all of them."""
        victim_seqs = self.state.seq_ids_of(victim)
        if not self.alloc.can_swap_out(*victim_seqs):
            return False
        blocks = sum(self.alloc.held_blocks(s) for s in victim_seqs)
        for seq_id in victim_seqs:
            moves.swap_out.extend(self.alloc.swap_out(seq_id))
        self.state.swapped.append(SwappedRequest(victim, *self.detach(victim), blocks))
        self.state.num_swaps_out += 1
        return True

    def requeue_for_recompute(self, request: Request, prefills, decodes) -> None:
        """Put the victim's sequences back at the front of the queue, to be re-prefilled
        from prompt + the tokens each has generated so far."""
        entries = []
        for seq in prefills:
            fresh = PrefillSeq(
                request, seq.sample, seq.tokens, seq.generated, True, seq.fork_children
            )
            fresh.token_step = seq.token_step
            entries.append(WaitingEntry(request, fresh))
        rows = zip(
            decodes["sample"].tolist(),
            decodes["generated"].tolist(),
            decodes["token_step"].tolist(),
        )
        for sample, generated, token_step in rows:
            entries.append(self.recompute_entry(request, sample, generated, token_step))
        self.state.waiting.extendleft(reversed(entries))

    def recompute_entry(
        self, request: Request, sample: int, generated: int, token_step: int
    ) -> WaitingEntry:
        """A sample that lost its KV, queued to re-prefill prompt + its ``generated``
        output tokens (the newest of them came out in step ``token_step``)."""
        tokens = self.sequence_tokens(request, sample, generated)
        seq = PrefillSeq(request, sample, tokens, generated, resumed=True, token_step=token_step)
        return WaitingEntry(request, seq)

    def sequence_tokens(self, request: Request, sample: int, generated: int) -> np.ndarray:
        state = np.asarray([self.outputs.stream_state(request.req_id, sample)], dtype=np.int64)
        outputs = self.outputs.tokens(state, np.arange(generated, dtype=np.int64))
        prompt = self.state.prompt_of(request)
        return np.concatenate([prompt, outputs.astype(prompt.dtype)])

    def resume_by_recompute(self, item: SwappedRequest) -> None:
        self.release(item.request, item.prefills, item.decodes)

    def swap_in_stays_blocked(self) -> bool:
        """Whether the head of the swapped queue cannot come back now for a reason only
        freed blocks or fewer running sequences could lift (the first two checks of
        :meth:`swap_in_waiting`): then steps that free nothing and run the same
        sequences keep it out too. No mutation."""
        state = self.state
        item = state.swapped[0]
        count = len(item.prefills) + len(item.decodes["seq_id"])
        if item.num_blocks + len(state.decodes) > state.available_blocks():
            return True
        return state.num_running_seqs() + count > self.cfg.max_num_seqs

    def swap_in_waiting(self, moves: Moves) -> None:
        """Swapped requests resume, in order, before any new request is admitted."""
        state = self.state
        while state.swapped:
            item = state.swapped[0]
            item_seqs = seq_ids(item.prefills, item.decodes)
            if item.num_blocks + len(state.decodes) > state.available_blocks():
                return
            if state.num_running_seqs() + len(item_seqs) > self.cfg.max_num_seqs:
                return
            if not self.alloc.can_swap_in(*item_seqs):
                return
            for seq_id in item_seqs:
                moves.swap_in.extend(self.alloc.swap_in(seq_id))
            state.swapped.popleft()
            state.prefilling.extend(item.prefills)
            state.decodes.extend(item.decodes)
