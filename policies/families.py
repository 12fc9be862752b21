"""Every family of policies, keyed by the short name validation and ``pagesim list``
use, in the order the listing shows them. Each registry describes its family
(:class:`policies.registry.Registry`); importing this module registers every shipped
policy.
"""

from __future__ import annotations

from policies.admission import ADMISSION
from policies.batching import BATCHING
from policies.eviction import EVICTORS  # (the package: every eviction policy registered)
from policies.preemption import MODES, VICTIMS
from policies.registry import Registry
from policies.routing import ROUTERS
from policies.scheduling import SCHEDULERS

FAMILIES: dict[str, Registry] = {
    "scheduling": SCHEDULERS,
    "batching": BATCHING,
    "admission": ADMISSION,
    "preemption": VICTIMS,
    "preemption mode": MODES,
    "eviction": EVICTORS,
    "routing": ROUTERS,
}
