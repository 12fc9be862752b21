"""What the engine keeps about each replica's sequences between steps.

Plain state, no SimPy and no policy: a prefill in progress, a request swapped to the
CPU pool, the running decode sequences as one numpy array, the waiting-queue entries
policies order, and what one step decided.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from backend.transfer import Transfer
from sim.engine.records import Limit
from sim.workload.request import Request


@dataclass(eq=False)
class PrefillSeq:
    """A sequence whose prompt (plus, after a recompute preemption, its generated
    tokens) is being computed. ``generated`` tokens were sampled before this prefill."""

    request: Request
    sample: int
    tokens: np.ndarray
    generated: int = 0
    resumed: bool = False
    fork_children: int = 0  # samples to fork from this one when its prompt is done
    seq_id: int = -1
    computed: int = 0  # tokens whose KV is in the pool
    held: int = 0  # tokens whose slots the allocator holds (>= computed)
    token_step: int = -1  # the replica's step that gave its newest token (-1: none yet)


@dataclass(eq=False)
class SwappedRequest:
    """A request whose sequences all live in the CPU pool."""

    request: Request
    prefills: list[PrefillSeq]
    decodes: dict[str, np.ndarray]
    num_blocks: int


class DecodeSet:
    """Running sequences in their decode phase: one int64 array, a row per field.

    Fields are plain attributes holding contiguous row views (``d.generated``, ...), so
    reading one is an attribute lookup (the decode step reads them a dozen times),
    per-step updates are in-place numpy operations, and removing finished sequences is
    a single fancy-indexing call, whatever the number of fields. Only ``extend`` and
    ``take`` replace the array, and they rebind the views."""

    FIELDS = (
        "seq_id",
        "req_id",
        "sample",
        "stream",
        "generated",
        "target",
        "context",
        "tenant",
        "token_step",  # the replica's step that gave the newest token (for ITL)
    )
    seq_id: np.ndarray
    req_id: np.ndarray
    sample: np.ndarray
    stream: np.ndarray
    generated: np.ndarray
    target: np.ndarray
    context: np.ndarray
    tenant: np.ndarray
    token_step: np.ndarray

    def __init__(self) -> None:
        self._set(np.zeros((len(self.FIELDS), 0), dtype=np.int64))

    def _set(self, data: np.ndarray) -> None:
        self.data = data
        self.size = int(data.shape[1])
        # One unpacking of the rows (in FIELDS order) instead of a setattr per field:
        # it runs on every step that a sequence joins or leaves.
        (
            self.seq_id,
            self.req_id,
            self.sample,
            self.stream,
            self.generated,
            self.target,
            self.context,
            self.tenant,
            self.token_step,
        ) = data

    def __len__(self) -> int:
        return self.size

    def extend(self, rows: dict[str, np.ndarray] | list[tuple[int, ...]]) -> None:
        """Append rows given as column arrays or as tuples in FIELDS order."""
        if isinstance(rows, list):
            if not rows:
                return
            block = np.asarray(rows, dtype=np.int64).T
        else:
            block = np.stack([rows[name] for name in self.FIELDS])
        self._set(np.concatenate([self.data, block], axis=1))

    def take(self, mask: np.ndarray) -> dict[str, np.ndarray]:
        """Remove the rows selected by ``mask`` and return them as column arrays."""
        # ``compress`` is numpy's cheapest boolean selection along an axis (about half
        # the cost of fancy indexing on a (fields, rows) array).
        taken = self.data.compress(mask, axis=1)
        self._set(self.data.compress(np.logical_not(mask), axis=1))
        return dict(zip(self.FIELDS, taken))


@dataclass(frozen=True, eq=False, slots=True)
class WaitingEntry:
    """A prefill waiting for admission (what scheduling policies order: they read
    ``request`` and ``resumed``; ``seq`` is the engine's)."""

    request: Request
    seq: PrefillSeq

    @property
    def resumed(self) -> bool:
        return self.seq.resumed


class StepPlan(NamedTuple):
    """What the scheduler decided for one step, complete and immutable once planned;
    applied after the step's time passes (planning builds it as a :class:`PlanDraft`)."""

    decode_rows: int = 0  # the first rows of the decode set that decode this step
    chunks: tuple[tuple[PrefillSeq, int], ...] = ()  # (prefill, tokens it computes)
    num_preempted: int = 0
    limit: Limit = Limit.NONE
    asked_scheduler: bool = False  # the batching mode asked for admissions
    held_by: str = ""  # the policy that held waiting requests back (limit POLICY)


@dataclass
class PlanDraft:
    """A :class:`StepPlan` while the step is being planned (planning mutates it)."""

    decode_rows: int = 0
    chunks: list[tuple[PrefillSeq, int]] = field(default_factory=list)
    num_preempted: int = 0
    limit: Limit = Limit.NONE
    asked_scheduler: bool = False
    held_by: str = ""

    def final(self) -> StepPlan:
        return StepPlan(
            self.decode_rows,
            tuple(self.chunks),
            self.num_preempted,
            self.limit,
            self.asked_scheduler,
            self.held_by,
        )


@dataclass
class Moves:
    """The transfers a step's planning collects, kept apart by what asked for them."""

    copies: list[Transfer] = field(default_factory=list)
    swap_out: list[Transfer] = field(default_factory=list)
    swap_in: list[Transfer] = field(default_factory=list)
    loads: list[Transfer] = field(default_factory=list)  # from an offload tier

    def in_order(self) -> tuple[Transfer, ...]:
        """All of them in the order an executor performs them: swap-outs first (they
        free the device blocks that swap-ins, loads and copies were then given), then
        swap-ins, then loads from an offload tier, then copy-on-write copies."""
        if not (self.swap_out or self.swap_in or self.loads):
            return tuple(self.copies)
        return (*self.swap_out, *self.swap_in, *self.loads, *self.copies)


def seq_ids(prefills: list[PrefillSeq], decodes: dict[str, np.ndarray]) -> list[int]:
    """Sequence ids of detached prefills and decode rows (as ``DecodeSet.take`` returns)."""
    return [s.seq_id for s in prefills] + decodes["seq_id"].tolist()


def new_entries(request: Request, prompt: np.ndarray, *, fan_out: bool) -> list[WaitingEntry]:
    """The waiting entries of a new request: one prefill whose samples fork when it is
    done, or with ``fan_out`` (vLLM V1) one independent entry per sample, each with its
    own prefill (the later ones hit the first one's blocks)."""
    if fan_out and request.n > 1:
        return [WaitingEntry(request, PrefillSeq(request, k, prompt)) for k in range(request.n)]
    return [WaitingEntry(request, PrefillSeq(request, 0, prompt, fork_children=request.n - 1))]
