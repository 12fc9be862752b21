"""Which allocator entries the step planner calls, chosen once per replica: a command's
unchecked (input-trusting) form where the allocator offers one (the engine's decode batch
and prompts are its own, checked already), the prefix tails a sliding window keeps where
the allocator keeps them, and admission's check with the engine's cap on a window's share.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from backend.capabilities import (
    AdmitsWithWindowCap,
    RetainsPrefixTails,
    TrustedAllocate,
    TrustedAppendBatch,
)
from backend.connectors.seam import ConnectorSeam
from sim.engine.config import EngineConfig
from sim.workload.request import Request


def batch_appender(alloc) -> Callable[[np.ndarray, np.ndarray], list]:
    """``append_batch`` of the engine's decode batch, its own running set (distinct, on
    the device, int64 ids; int32 tokens): the allocator's unchecked entry where it has
    one."""
    if isinstance(alloc, TrustedAppendBatch):
        return alloc.append_batch_trusted
    return alloc.append_batch


def prompt_allocator(
    alloc, seam: ConnectorSeam | None
) -> Callable[[int, np.ndarray, int, int], int]:
    """``allocate(seq_id, prompt, salt, max_new_tokens)`` of a prompt none of whose KV is
    computed yet: through the KV connector's ``seam`` where there is one, else the
    allocator's unchecked entry where it has one (prompts are the workload's int32
    arrays, sequence ids the engine's own count)."""
    if seam is not None:
        return lambda seq_id, tokens, salt, _max_new_tokens: seam.allocate(seq_id, tokens, salt, 0)
    if isinstance(alloc, TrustedAllocate):
        trusted = alloc.allocate_trusted
        return lambda seq_id, tokens, salt, _max_new_tokens: trusted(seq_id, tokens, salt, 0)

    def checked(seq_id: int, tokens: np.ndarray, salt: int, max_new_tokens: int) -> int:
        return alloc.allocate(
            seq_id, tokens, salt=salt, max_new_tokens=max_new_tokens, computed_tokens=0
        )

    return checked


def keeping_prefix_tails(alloc, allocate) -> Callable[..., int]:
    """``allocate(seq_id, first_tokens, salt, max_new_tokens)`` (prompt_allocator's) as
    ``(seq_id, first_tokens, all_tokens, request, max_new_tokens)``: on an allocator
    whose sliding windows keep only the prefix tails a later request can resume at
    (capabilities.RetainsPrefixTails), it also says which: the prompt's end and the
    shared-prefix junction, read at the lookup, as vLLM reads it (allocating may evict
    the very blocks that showed it)."""
    if not isinstance(alloc, RetainsPrefixTails):
        return lambda seq_id, first, _all, request, max_new: allocate(
            seq_id, first, request.tenant, max_new
        )

    def allocate_keeping_tails(seq_id, first, every, request: Request, max_new_tokens: int):
        shared = alloc.shared_prefix_tokens(every, salt=request.tenant)
        cached = allocate(seq_id, first, request.tenant, max_new_tokens)
        alloc.retain_prefix_tails(
            seq_id, num_prompt_tokens=request.prompt_len, shared_prefix_tokens=shared
        )
        return cached

    return allocate_keeping_tails


def whole_sequence_check(
    alloc, config: EngineConfig, seam: ConnectorSeam | None
) -> Callable[..., bool]:
    """``can_allocate``, or the allocator's check with the engine's cap on a sliding
    window's share where the engine's rules set one and the allocator has it; through
    the KV connector's ``seam`` where there is one (its blocks count)."""
    in_flight = config.rules.window_admission_tokens(
        config.max_num_batched_tokens, config.async_scheduling
    )
    checker = seam if seam is not None else alloc
    if in_flight is not None and isinstance(alloc, AdmitsWithWindowCap):
        return partial(checker.can_admit, in_flight_tokens=in_flight)
    return checker.can_allocate
