"""Liveness: what a replica does when a step could schedule nothing although work is
queued, so that no request waits forever."""

from __future__ import annotations

from collections.abc import Callable

from sim.engine.memory import Memory
from sim.engine.policy_guard import PolicyFailure
from sim.engine.replica_state import StepPlan
from sim.engine.state import ReplicaState
from sim.workload.request import Request


def unblock(
    state: ReplicaState, memory: Memory, plan: StepPlan, reject: Callable[[Request, str], None]
) -> None:
    """Nothing could be scheduled although work is queued: with nothing running, the
    head of the queue can never be admitted, so it is rejected (``reject(request,
    reason)``) — unless a policy held it back, which is that policy's failure, not the
    request's. Mutates the state (and the allocator, through ``memory``)."""
    running = state.prefilling or len(state.decodes)
    if state.prefilling and not len(state.decodes):
        # First-chunk admission let partial prompts fill the pool: free some. There
        # is no step to log it in, so the next step's record carries it.
        memory.make_room(None)
        return
    if state.swapped and not running:
        # Bring one swapped request back by recompute instead of waiting forever.
        memory.resume_by_recompute(state.swapped.popleft())
        return
    if state.waiting and not running:
        if not plan.asked_scheduler:
            problem = "asked for no admissions with an empty replica and requests waiting"
            raise PolicyFailure("scheduler.batching", "compose()", problem)
        if plan.held_by:
            waiting = len(state.waiting)
            problem = f"admitted none of the {waiting} waiting requests to an empty replica"
            raise PolicyFailure(plan.held_by, "order()", problem)
        entry = state.waiting.popleft()
        for other in [e for e in state.waiting if e.request is entry.request]:
            state.waiting.remove(other)  # its other samples, when they fan out
        reject(entry.request, "cannot be admitted even with an empty replica")
