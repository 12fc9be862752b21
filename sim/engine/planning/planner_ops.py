"""What the step's moves use of the planner (:class:`PlannerOps`): the step builder and
vLLM's running loop are written against this contract, not against
``sim.engine.planning.planner.StepPlanner``, which builds them; so the modules form no circle."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from backend.base import Allocator
from sim.engine.config import EngineConfig
from sim.engine.executor import TokenSource
from sim.engine.memory import Memory
from sim.engine.replica_state import Moves, PlanDraft, PrefillSeq
from sim.engine.state import ReplicaState
from sim.workload.request import Request


class PlannerOps(Protocol):
    """One replica's step planner as its moves see it. Every method mutates the replica
    state, the allocator and the plan it is given; none raises for lack of memory (a
    miss preempts or stops the move)."""

    state: ReplicaState
    alloc: Allocator
    cfg: EngineConfig
    memory: Memory
    outputs: TokenSource
    #: ``(seq_ids, tokens) -> block copies``: one decode slot for each sequence (the
    #: allocator's unchecked entry where it has one)
    append_batch: Callable[[np.ndarray, np.ndarray], list]

    def schedule_decodes(self, plan: PlanDraft, moves: Moves):
        """Give every decoding sequence one slot, preempting on a free-list miss; returns
        the decode arrays (ids, contexts, input tokens)."""

    def schedule_running_prefills(self, plan: PlanDraft, budget: int) -> int:
        """Run the next chunk of each prefilling sequence; returns the budget left."""

    def take_chunk(self, plan: PlanDraft, seq: PrefillSeq, take: int) -> None:
        """``take`` tokens of ``seq`` run this step (their slots are held)."""

    def hold_chunk(self, seq: PrefillSeq, take: int) -> None:
        """Hold the slots of ``seq``'s next ``take`` tokens (raises OutOfBlocks)."""

    def chunk_size(self, seq: PrefillSeq, budget: int, plan: PlanDraft) -> int:
        """Prompt tokens of ``seq`` to compute this step (0: none)."""

    def admit_waiting(
        self,
        plan: PlanDraft,
        budget: int,
        only: Callable[[Request], bool] | None = None,
        beyond_budget: bool = False,
    ) -> tuple[list[Request], int]:
        """Admit waiting requests in the scheduler's order; returns them and the budget
        left."""
