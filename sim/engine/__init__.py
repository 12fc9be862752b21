"""The SimPy serving engine: replicas stepping schedule -> execute -> apply, behind a
router.

A replica (:mod:`.replica`) keeps its sequences (:mod:`.sequences`), lets its batching
mode compose each step, runs it on an executor (:mod:`.executor`: a cost model or the
real backend) and applies the result. The engine sees policies and the allocator only
through their interfaces.
"""

from sim.engine.executor import Executor
from sim.engine.replica import Cluster, EngineConfig, Replica

__all__ = ["Cluster", "EngineConfig", "Executor", "Replica"]
