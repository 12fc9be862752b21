"""An example user plug-in: a scheduler defined outside pagesim, loaded by file path.

A scenario names it as ``custom_policy.py:PremiumTenantsFirst``; a relative path is
looked up beside the scenario file first, then in the directory ``pagesim`` runs in (or
install the module and name it as ``module:attribute``).

Any class with an ``order(waiting, view)`` method works (policies/scheduling.py has the
Protocol, policies/views.py what ``waiting`` and ``view`` offer). Its constructor gets
``scheduler.params`` as keyword arguments, plus any field of the run's context it names
(policies/context.py): here ``slo``, so that premium requests still waiting past their
TTFT deadline stop jumping the queue. Its test: tests/policies/test_custom_policy.py.
"""

from __future__ import annotations

from policies.context import SLO


class PremiumTenantsFirst:
    """Requests of the premium tenants first while they can still meet their TTFT SLO,
    everyone else after; arrival order within."""

    def __init__(self, slo: SLO, premium_tenants: list[int] | tuple[int, ...] = (0,)):
        self.ttft_s = slo.ttft_s  # from the run
        self.premium = frozenset(int(t) for t in premium_tenants)  # from params

    def order(self, waiting, view):
        def first(request) -> bool:
            in_time = view.now <= request.arrival_s + self.ttft_s
            return request.tenant in self.premium and in_time

        # Preempted (resumed) requests keep the front: they hold progress.
        resumed = [e for e in waiting if e.resumed]
        fresh = [e for e in waiting if not e.resumed]
        fresh.sort(key=lambda e: (not first(e.request), e.request.arrival_s, e.request.req_id))
        return resumed + fresh
