"""The request stream: what arrives, when, with which tokens.

:mod:`.generate` turns the scenario's workload section into requests (:mod:`.request`),
drawing lengths and arrival instants in :mod:`.sampling`; a request's prompt token ids
are built when read (:mod:`.prompts`) from the pure functions of :mod:`.tokens` (the
same the engine uses to synthesise output tokens).
"""

from sim.workload.generate import generate_requests
from sim.workload.request import Request
from sim.workload.tokens import SyntheticOutputs

__all__ = ["Request", "SyntheticOutputs", "generate_requests"]
