"""An example user plug-in: a scheduler defined outside pagesim, loaded by file path.

A scenario names it as ``scenarios/policies/custom_policy.py:PremiumTenantsFirst``. A
relative path is resolved against the working directory of the ``pagesim`` command (not
the scenario file's directory), so run from the repository root, or give an absolute
path, or install the module and name it as ``module:attribute``.

Any class with an ``order(waiting, view)`` method works (see policies/scheduling.py for
the Protocol); its constructor receives ``scheduler.params`` as keyword arguments.
"""

from __future__ import annotations


class PremiumTenantsFirst:
    """Requests of the premium tenants first, everyone else after; arrival order within."""

    def __init__(self, premium_tenants: list[int] | tuple[int, ...] = (0,)):
        self.premium = frozenset(int(t) for t in premium_tenants)

    def order(self, waiting, view):
        # Preempted (resumed) requests keep the front: they hold progress.
        resumed = [e for e in waiting if e.resumed]
        fresh = [e for e in waiting if not e.resumed]
        fresh.sort(
            key=lambda e: (
                e.request.tenant not in self.premium,
                e.request.arrival_s,
                e.request.req_id,
            )
        )
        return resumed + fresh
