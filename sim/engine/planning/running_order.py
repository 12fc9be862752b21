"""vLLM V1's running loop (``StepBuilder.running``): every running sequence, in the
order it was admitted, takes its decode token or its next prompt chunk from the step's
token budget, and a sequence whose blocks cannot be allocated preempts the victim
policy's pick (the tail of the running list under ``last-admitted``) until it fits or
is the victim itself.

Order matters only when budget or memory runs short: a long chunk early in the list can
use up the budget of later decodes, and blocks go to earlier sequences first. So the
step takes one of two paths with the same result: when every sequence's share fits in
the free blocks, the allocations are made at once (the decodes in one vectorised
``append_batch``); otherwise sequence by sequence, preempting as vLLM does.
Sequence ids are numbered at admission, so ascending ids are the running list's order.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from backend.base import OutOfBlocks
from sim.engine.planning.planner_ops import PlannerOps
from sim.engine.replica_state import Moves, PlanDraft, PrefillSeq

#: (sequence id, its prefill, or None for a decode row), in the running list's order
Entry = tuple[int, PrefillSeq | None]


def schedule_running(planner: PlannerOps, plan: PlanDraft, moves: Moves, budget: int):
    """Plan the running sequences' share of the step. Mutates the state (preemptions,
    the decode rows' order: the scheduled ones first), the allocator and ``plan``.
    Returns the budget left and the decode arrays (ids, contexts, input tokens)."""
    state = planner.state
    if not state.prefilling:
        # Decodes only: each takes one token of a budget that holds them all
        # (max_num_batched_tokens >= max_num_seqs), and tail preemption until the rest
        # fit is what vLLM's one-by-one loop ends with too.
        arrays = planner.schedule_decodes(plan, moves)
        return budget - plan.decode_rows, arrays
    d = state.decodes
    order = np.argsort(d.seq_id, kind="stable")  # decode rows in the running list's order
    chunks, decoded_rows = _shares(planner, plan, order, budget)
    # (the allocator counts copy-on-write of a shared last block too, as after a fork)
    needed = planner.alloc.blocks_needed_for_batch(d.seq_id[decoded_rows])
    needed += sum(_chunk_blocks(planner, seq, take) for seq, take in chunks)
    if needed <= state.available_blocks():
        decoded = d.seq_id[decoded_rows]
        _grow_in_order(planner, moves, chunks, decoded)
    else:
        entries = sorted(
            [(s.seq_id, s) for s in state.prefilling] + [(i, None) for i in d.seq_id.tolist()],
            key=lambda entry: entry[0],
        )
        chunks, decoded = _one_by_one(planner, plan, moves, entries, budget)
    for seq, take in chunks:
        planner.take_chunk(plan, seq, take)
    budget -= sum(take for _, take in chunks) + len(decoded)
    return budget, _decode_arrays(planner, plan, decoded)


def _shares(planner: PlannerOps, plan: PlanDraft, order: np.ndarray, budget: int):
    """What the running list gets of the budget if nothing is preempted: the prompt
    chunks ((prefill, tokens), in order) and the decode rows that get their token (a
    prefix of ``order``, the rows in the running list's order). Python work per
    prefill, not per decode: the decodes between two prefills take one token each."""
    d = planner.state.decodes
    ids = d.seq_id[order]
    chunks = []
    before = 0  # decodes (in order) ahead of the current prefill
    for seq in sorted(planner.state.prefilling, key=lambda s: s.seq_id):
        ahead = int(np.searchsorted(ids, seq.seq_id))
        if budget <= ahead - before:
            return chunks, order[: before + max(budget, 0)]
        budget -= ahead - before
        before = ahead
        take = planner.chunk_size(seq, budget, plan)
        if take:
            chunks.append((seq, take))
            budget -= take
    return chunks, order[: before + max(0, min(budget, ids.shape[0] - before))]


def _chunk_blocks(planner: PlannerOps, seq: PrefillSeq, take: int) -> int:
    """Blocks ``seq`` needs beyond those it holds to compute its next ``take`` tokens."""
    return planner.alloc.blocks_to_grow(seq.held, seq.computed + take)


def _grow_in_order(planner: PlannerOps, moves: Moves, chunks, decoded: np.ndarray) -> None:
    """Hold each chunk and each decode's token in the running list's order (``chunks``
    and ``decoded`` are each in it): the blocks windows release come back in that order,
    as vLLM's loop frees them. The decodes between two chunks grow in one batch."""
    d = planner.state.decodes
    order = np.argsort(d.seq_id, kind="stable")  # the decode rows by sequence id
    rows_of = partial(_rows_of, order, d.seq_id[order])
    start = 0
    for seq, take in chunks:
        cut = int(np.searchsorted(decoded, seq.seq_id))
        _append_decodes(planner, moves, rows_of(decoded[start:cut]))
        start = cut
        planner.hold_chunk(seq, take)
    _append_decodes(planner, moves, rows_of(decoded[start:]))


def _rows_of(order: np.ndarray, ranked: np.ndarray, seq_ids: np.ndarray) -> np.ndarray:
    """The decode rows (ascending) of ``seq_ids``, each a decode's sequence id, given
    the rows ``order``ed by id and the ids so ``ranked``."""
    return np.sort(order[np.searchsorted(ranked, seq_ids)])


def _append_decodes(planner: PlannerOps, moves: Moves, rows: np.ndarray) -> None:
    """One slot for the newest token of each decode of ``rows``. Raises OutOfBlocks
    (nothing changed) when they do not all fit."""
    if not rows.shape[0]:
        return
    d = planner.state.decodes
    tokens = planner.outputs.decode_inputs(d.stream[rows], d.generated[rows])
    moves.copies.extend(planner.append_batch(d.seq_id[rows], tokens))


def _one_by_one(planner: PlannerOps, plan, moves, entries: list[Entry], budget: int):
    """vLLM's loop when memory runs short: allocate in order, preempting on a miss.
    Returns the chunks and the decoded sequence ids."""
    state = planner.state
    chunks: dict[int, tuple[PrefillSeq, int]] = {}
    decoded: dict[int, int] = {}  # sequence id -> 1, in scheduling order
    live = _live_ids(state)
    for seq_id, seq in entries:
        if budget <= 0:
            break
        if seq_id not in live:
            continue  # preempted earlier in this loop
        take = 1 if seq is None else planner.chunk_size(seq, budget, plan)
        if not take:
            continue
        while not _allocate_one(planner, moves, seq_id, seq, take):
            planner.memory.make_room(moves)
            now_live = _live_ids(state)
            for gone in live - now_live:  # a victim already scheduled gives its share back
                if gone in chunks:
                    budget += chunks.pop(gone)[1]
                elif decoded.pop(gone, None) is not None:
                    budget += 1
            live = now_live
            if seq_id not in live:
                break  # it was the victim itself
        if seq_id not in live:
            continue
        if seq is None:
            decoded[seq_id] = 1
        else:
            chunks[seq_id] = (seq, take)
        budget -= take
    return list(chunks.values()), np.fromiter(decoded, np.int64)


def _live_ids(state) -> set[int]:
    return {s.seq_id for s in state.prefilling} | set(state.decodes.seq_id.tolist())


def _allocate_one(planner: PlannerOps, moves, seq_id: int, seq, take: int) -> bool:
    """Allocate one running sequence's share, as the allocator answers (a sliding
    window gives its blocks back first: more than ``blocks_to_grow`` counts on)."""
    try:
        if seq is not None:
            planner.hold_chunk(seq, take)
        else:
            rows = np.flatnonzero(planner.state.decodes.seq_id == seq_id)
            _append_decodes(planner, moves, rows)
    except OutOfBlocks:
        return False
    return True


def _decode_arrays(planner: PlannerOps, plan: PlanDraft, decoded: np.ndarray):
    """Move the decoded rows first (apply reads the first ``plan.decode_rows``), count
    their new token in their context, and return (ids, contexts, input tokens)."""
    d = planner.state.decodes
    if decoded.shape[0] < d.seq_id.shape[0]:  # (``decoded`` are distinct decode ids)
        later = ~np.isin(d.seq_id, decoded)
        d.extend(d.take(later))  # the others after them, in their order
    rows = plan.decode_rows = int(decoded.shape[0])
    if not rows:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0, dtype=np.int32)
    tokens = planner.outputs.decode_inputs(d.stream[:rows], d.generated[:rows])
    d.context[:rows] += 1
    return d.seq_id[:rows].copy(), d.context[:rows].copy(), tokens
