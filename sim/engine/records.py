"""What the engine emits: one :class:`StepRecord` per executed step and one
:class:`RequestOutcome` per request, both immutable. The output stage (sim.output)
consumes them; nothing downstream reads the engine's live state.
"""

from __future__ import annotations

import math
from enum import IntEnum
from typing import NamedTuple

from sim.workload.request import Request


class Limit(IntEnum):
    """What kept a step from admitting the requests still waiting when it was planned
    (steps.csv's ``limit`` column, by name). ``NONE``: nothing was waiting after
    scheduling (the queue drained, so the step was bound by compute alone)."""

    NONE = 0
    MAX_NUM_SEQS = 1  # every sequence slot (scheduler.max_num_seqs) was taken
    TOKEN_BUDGET = 2  # the step's max_num_batched_tokens were spent
    KV_BLOCKS = 3  # admission refused for memory, a preemption, or a swapped request waits
    POLICY = 4  # the scheduling policy or batching mode held requests back


#: Names of :class:`Limit` values, indexed by value.
LIMIT_NAMES = tuple(limit.name.lower() for limit in Limit)


class StepRecord(NamedTuple):
    """One executed step of one replica: steps.csv's row, field for field and in file
    order. Memory figures are read after the step's results were applied; units are the
    allocator's (blocks for the paged manager, slots for contiguous baselines).

    Immutable like a frozen dataclass, but a tuple: one is made per step on the hot
    path, and the step log stores it as a numpy row without reading field by field."""

    time_s: float  # when the step started (simulated seconds)
    replica: int
    duration_s: float
    batch_size: int  # sequences in the step (prefill chunks + decodes)
    num_prefill_tokens: int
    num_decode_tokens: int
    used_blocks: int
    cached_blocks: int  # free but holding reusable prefix KV
    evicted_blocks: int  # cached prefix blocks the eviction policy reclaimed in this step
    free_blocks: int
    token_slots: int  # slots holding a token's KV
    reserved_slots: int  # held for tokens not computed yet
    internal_frag_slots: int
    external_frag_slots: int
    free_slots: int
    swapped_blocks: int  # device blocks the swapped-out requests held
    queue_len: int  # requests waiting after the step was planned
    num_preempted: int  # preemptions while planning it (and any since the last step)
    limit: Limit  # what kept it from admitting more


#: The StepRecord fields, in order: steps.csv's columns.
STEP_FIELDS = StepRecord._fields


#: Reason an in-flight request gets when the run stops at its time horizon.
UNFINISHED_REASON = "unfinished at max_sim_time_s"


class RequestOutcome(NamedTuple):
    """What happened to one request: its inputs plus the times and counts the engine
    observed (simulated seconds; NaN for what never happened). A request is finished when
    ``rejected_reason`` is empty; unfinished ones carry :data:`UNFINISHED_REASON`.

    Immutable, and a tuple like :class:`StepRecord`: one is made per request, and a
    frozen dataclass's ``__init__`` (a guarded ``object.__setattr__`` per field) costs
    several times a tuple's."""

    request: Request
    replica: int
    first_scheduled_s: float
    first_token_s: float
    finish_s: float
    cached_prompt_tokens: int  # prompt tokens served from the prefix cache at admission
    num_preemptions: int
    output_tokens: int  # output_len * n when finished; what running samples made if not
    rejected_reason: str
    preemption_times: tuple[float, ...] = ()  # when each preemption hit it

    @classmethod
    def unserved(cls, request: Request, replica: int, reason: str) -> RequestOutcome:
        """A request that never ran: nothing observed but the reason."""
        nan = math.nan
        return cls(request, replica, nan, nan, nan, 0, 0, 0, reason)

    @property
    def finished(self) -> bool:
        return not self.rejected_reason

    # The request's inputs, read through (the output stage needs these alongside).
    @property
    def req_id(self) -> int:
        return self.request.req_id

    @property
    def arrival_s(self) -> float:
        return self.request.arrival_s

    @property
    def prompt_len(self) -> int:
        return self.request.prompt_len

    @property
    def output_len(self) -> int:
        return self.request.output_len

    @property
    def n(self) -> int:
        return self.request.n

    @property
    def tenant(self) -> int:
        return self.request.tenant

    @property
    def priority(self) -> int:
        return self.request.priority
