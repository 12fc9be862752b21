"""The SimPy serving engine: replicas stepping schedule -> execute -> apply, behind a
router.

A replica (:mod:`.replica`) keeps its live state (:mod:`.state`, :mod:`.sequences`),
plans each step (:mod:`.scheduling`, the batching mode composing it through
:mod:`.step_builder`), runs it on an executor (:mod:`.executor`: a cost model or the real
backend), applies the result (:mod:`.completion`) and frees memory under pressure
(:mod:`.memory`). It emits typed records (:mod:`.records`): one per step, one per
request. The engine sees policies and the allocator only through their interfaces.
"""

from sim.engine.cluster import Cluster
from sim.engine.config import EngineConfig, ReplicaPolicies
from sim.engine.executor import Executor, TokenSource
from sim.engine.records import Limit, RequestOutcome, StepRecord
from sim.engine.replica import Replica

__all__ = [
    "Cluster",
    "EngineConfig",
    "Executor",
    "Limit",
    "Replica",
    "ReplicaPolicies",
    "RequestOutcome",
    "StepRecord",
    "TokenSource",
]
