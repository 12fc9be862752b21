"""What one replica is configured with: the scheduler's knobs and its policies."""

from __future__ import annotations

from dataclasses import dataclass, field

from policies.admission import AdmissionPolicy
from policies.batching import BatchingMode
from policies.context import ServedTokens
from policies.engine_rules import EngineRules
from policies.preemption import PreemptionMode, VictimPolicy
from policies.scheduling import Scheduler


@dataclass(frozen=True)
class EngineConfig:
    """The scheduler knobs of one replica (validated by the scenario schema)."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = True
    watermark_blocks: int = 0  # blocks kept free when admitting new requests
    max_model_len: int = 8192
    async_scheduling: bool = False  # arrivals during a step wait one more step
    request_timeout_s: float | None = None  # the client gives up (sim/engine/deadlines.py)
    long_prefill_token_threshold: int = 0  # most prompt tokens a step gives one request
    #: the engine profile's own rules (scheduler.engine), called at named points of a step
    rules: EngineRules = field(default_factory=EngineRules)


@dataclass(frozen=True)
class ReplicaPolicies:
    """The policies one replica decides with (each built by policies.context)."""

    scheduler: Scheduler  # the order waiting requests are offered in
    batching: BatchingMode  # which kinds of work a step holds
    admission: AdmissionPolicy  # how much of a prompt must fit to admit it
    victim: VictimPolicy  # who is preempted on a free-list miss
    mode: PreemptionMode  # swapped or recomputed
    #: counted per tenant only when a policy asked for ``served_tokens``
    served_tokens: ServedTokens | None = None
