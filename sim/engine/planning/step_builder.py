"""The moves a batching mode composes a step from (policies.batching.StepBuilder)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sim.engine.planning.planner_ops import PlannerOps
from sim.engine.planning.running_order import schedule_running
from sim.engine.replica_state import Moves, PlanDraft
from sim.workload.request import Request


class StepBuilder:
    """One step's moves, carried out by the planner; it keeps the step's token budget.
    Each move runs at most once per step."""

    _NO_DECODES = (
        np.zeros(0, dtype=np.int64),
        np.zeros(0, dtype=np.int64),
        np.zeros(0, dtype=np.int32),
    )

    def __init__(self, planner: PlannerOps, plan: PlanDraft, moves: Moves):
        self._planner, self._plan, self._moves = planner, plan, moves
        self._budget = planner.cfg.max_num_batched_tokens
        self.decode_arrays = self._NO_DECODES
        self._done: set[str] = set()
        self._preemptions_before = planner.state.num_preemptions

    def _once(self, move: str) -> None:
        if move in self._done:
            raise RuntimeError(f"batching mode called step.{move}() twice in one step")
        self._done.add(move)

    def decodes(self) -> None:
        self._once("decodes")
        self.decode_arrays = self._planner.schedule_decodes(self._plan, self._moves)
        self._budget -= self.decode_arrays[0].shape[0]

    def running_prefills(self) -> None:
        self._once("running_prefills")
        self._budget = self._planner.schedule_running_prefills(self._plan, self._budget)

    def running(self) -> None:
        self._once("decodes")  # (it is both moves: neither may follow it)
        self._once("running_prefills")
        self._budget, self.decode_arrays = schedule_running(
            self._planner, self._plan, self._moves, self._budget
        )

    def admit(
        self, only: Callable[[Request], bool] | None = None, beyond_budget: bool = False
    ) -> list[Request]:
        self._once("admit")
        admitted, self._budget = self._planner.admit_waiting(
            self._plan, self._budget, only, beyond_budget
        )
        return admitted

    @property
    def has_prefill_chunks(self) -> bool:
        return bool(self._plan.chunks)

    @property
    def preempted(self) -> bool:
        return self._planner.state.num_preemptions != self._preemptions_before

    @property
    def replica_empty(self) -> bool:
        return self._planner.state.is_idle()
