"""Replicas behind a router, fed by one arrival process."""

from __future__ import annotations

import math
from collections.abc import Sequence

import simpy

from policies.routing import Router
from sim.engine.policy_guard import PolicyFailure, brief
from sim.engine.records import RequestOutcome
from sim.engine.replica import Replica
from sim.workload.request import Request


def arrival_delay(now: float, arrival: float) -> float:
    """The timeout from ``now`` that ends exactly at ``arrival``, never before it: now +
    (arrival - now) can round one ulp below arrival, so it steps up."""
    delay = arrival - now
    while now + delay < arrival:
        delay = math.nextafter(delay, math.inf)
    return delay


def checked_route(
    router: Router, request: Request, views: Sequence, now: float, role: str = "routing.router"
) -> int:
    """``router``'s choice for ``request`` among ``views``, checked: an index into them.
    Raises PolicyFailure naming ``role`` (the scenario field of the router)."""
    chosen = router.route(request, views, now)
    count = len(views)
    if isinstance(chosen, bool) or not isinstance(chosen, int) or not 0 <= chosen < count:
        problem = f"returned {brief(chosen)} (expected a replica index 0..{count - 1})"
        raise PolicyFailure(role, "route()", problem)
    return chosen


class Arrivals:
    """Replicas fed by one arrival process; :meth:`dispatch` (a subclass's) sends each
    request on its way at its arrival time."""

    def __init__(self, env: simpy.Environment, replicas: Sequence[Replica]):
        self.env = env
        self.replicas = list(replicas)
        self._requests: Sequence[Request] = ()
        self._num_arrived = 0
        for replica in self.replicas:
            # With k replicas, about the k-th next arrival is the first routed to a given
            # one: how far a decode stretch is likely to run (speed only, not results).
            replica.horizon = lambda: self.arrival_after(len(self.replicas))

    def arrival_after(self, count: int) -> float:
        """When the ``count``-th request still to arrive arrives (inf: fewer are left)."""
        index = self._num_arrived + count - 1
        return self._requests[index].arrival_s if index < len(self._requests) else math.inf

    def arrivals(self, requests: Sequence[Request]):
        """SimPy process: dispatch each request at its arrival time."""
        self._requests, self._num_arrived = requests, 0
        env = self.env
        for i, request in enumerate(requests):
            delay = arrival_delay(env.now, request.arrival_s)
            if delay > 0:
                yield env.timeout(delay)
            self._num_arrived = i + 1
            self.dispatch(request)

    def dispatch(self, request: Request) -> None:
        raise NotImplementedError

    def in_flight_outcomes(self, reason: str) -> list[RequestOutcome]:
        """Outcomes of the requests in flight on the replicas (the run stopped)."""
        return [o for replica in self.replicas for o in replica.unfinished_outcomes(reason)]

    def unfinished_outcomes(self, reason: str) -> list[RequestOutcome]:
        """Outcomes of every request the run did not finish or reject: those in flight
        and those that had not arrived (replica 0, nothing observed)."""
        outcomes = self.in_flight_outcomes(reason)
        not_arrived = self._requests[self._num_arrived :]
        outcomes += [RequestOutcome.unserved(r, 0, reason) for r in not_arrived]
        return outcomes


class Cluster(Arrivals):
    """Replicas behind a router, fed by one arrival process."""

    def __init__(self, env: simpy.Environment, replicas: Sequence[Replica], router: Router):
        super().__init__(env, replicas)
        self.router = router
        self._views = tuple(replica.view for replica in self.replicas)  # what routers read

    def dispatch(self, request: Request) -> None:
        """Hand ``request`` to the replica the router picks."""
        self.replicas[self.route(request)].submit(request)

    def route(self, request: Request) -> int:
        """The router's choice for ``request``, checked: an index into the replicas."""
        return checked_route(self.router, request, self._views, self.env.now)
