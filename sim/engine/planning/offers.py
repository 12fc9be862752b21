"""What the step planner's admission reads from policies, checked as it is used: the
scheduler's order of the waiting queue and a batching mode's filter. A broken contract is
a PolicyFailure naming the policy and the hook (sim/engine/policy_guard.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from sim.engine.policy_guard import PolicyFailure, brief
from sim.engine.replica_state import WaitingEntry
from sim.workload.request import Request


def offered(scheduler, view, waiting, admitted: list) -> Iterator[WaitingEntry]:
    """The scheduler's order, checked as it is used: only waiting entries, each once
    (the queue itself, as FCFS returns it, needs no check)."""
    order = scheduler.order(waiting, view)
    if order is waiting:
        yield from waiting
        return
    try:
        entries = iter(order)
    except TypeError:
        raise PolicyFailure(
            "scheduler.policy", "order()", f"returned {brief(order)}, not the waiting entries"
        ) from None
    while True:
        try:
            entry = next(entries)
        except StopIteration:
            return
        except Exception as err:  # a lazy order failing part-way (a generator)
            problem = f"raised {type(err).__name__}: {err}"
            raise PolicyFailure("scheduler.policy", "order()", problem) from err
        if not isinstance(entry, WaitingEntry) or entry not in waiting:
            problem = f"returned {brief(entry)}, which is not a waiting entry"
            raise PolicyFailure("scheduler.policy", "order()", problem)
        if any(entry is done for done in admitted):
            problem = f"returned request {entry.request.req_id} twice"
            raise PolicyFailure("scheduler.policy", "order()", problem)
        yield entry


def batching_accepts(only: Callable[[Request], bool], request: Request) -> bool:
    try:
        return bool(only(request))
    except Exception as err:  # the batching mode's own filter
        problem = f"raised {type(err).__name__}: {err}"
        raise PolicyFailure("scheduler.batching", "admit(only=...)", problem) from err
