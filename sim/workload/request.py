"""A user request: what the workload generates and every later stage reads."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False, slots=True)
class Request:
    """One user request as the workload generates it (immutable; what the engine
    observes of it is its :class:`~sim.engine.records.RequestOutcome`)."""

    req_id: int
    arrival_s: float
    prompt: np.ndarray  # int32 token ids
    output_len: int  # true number of tokens to generate (the oracle knows it)
    tenant: int = 0  # also the prefix-cache salt unless sharing is opted in
    priority: int = 0  # larger = more important
    prefix_group: int = -1  # which shared system prompt, -1 = none
    session: int = -1  # multi-turn session id, -1 = none
    turn: int = 0
    n: int = 1  # parallel samples (forked sequences sharing the prompt)

    @property
    def prompt_len(self) -> int:
        return int(self.prompt.shape[0])
