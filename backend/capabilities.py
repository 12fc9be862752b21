"""The optional capabilities an allocator declares by having their methods, each a
runtime-checkable Protocol the engine checks with ``isinstance`` (never an attribute
probe). A method set to None is not had: that is how :class:`backend.base.Allocator`
takes the unchecked form of a command away from a subclass that overrides the command
(:data:`UNCHECKED_FORMS`). Decode stretches are ``backend.stretch.DecodeStretches``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

__all__ = [
    "UNCHECKED_FORMS",
    "Snapshots",
    "TrustedAllocate",
    "TrustedAppendBatch",
    "TrustedAppendSteps",
    "UnpublishesBlocks",
    "AdmitsWithWindowCap",
    "TakesExternalKV",
    "hide_bypassed_unchecked_forms",
]


#: Each unchecked entry an allocator may offer, with the command it is the input-trusting
#: form of (for a caller that guarantees its input: the engine's own sequence ids,
#: int32 tokens, a batch of distinct live sequences).
UNCHECKED_FORMS = {
    "allocate_trusted": "allocate",
    "append_batch_trusted": "append_batch",
    "append_steps_trusted": "append_steps",
}


def hide_bypassed_unchecked_forms(cls: type) -> None:
    """Set to None (no Protocol's member) each unchecked form of ``cls`` defined above a
    class that overrides its checked command: a subclass overriding a command must see
    every call, so the engine cannot go around it. Called once per class, at creation."""
    mro = cls.__mro__
    for unchecked, checked in UNCHECKED_FORMS.items():
        at_unchecked = next((i for i, c in enumerate(mro) if unchecked in vars(c)), None)
        at_checked = next((i for i, c in enumerate(mro) if checked in vars(c)), len(mro))
        if at_unchecked is not None and at_unchecked > at_checked:
            setattr(cls, unchecked, None)


@runtime_checkable
class TrustedAllocate(Protocol):
    """``allocate`` for a prompt of int32 ``tokens`` under a new engine sequence id."""

    def allocate_trusted(
        self, seq: int, tokens: np.ndarray, salt: int, computed_tokens: int | None = None
    ) -> int: ...


@runtime_checkable
class TrustedAppendBatch(Protocol):
    """``append_batch`` for distinct live device sequences (int64) and int32 tokens."""

    def append_batch_trusted(self, seqs: np.ndarray, tokens: np.ndarray) -> list: ...


@runtime_checkable
class TrustedAppendSteps(Protocol):
    """``append_steps`` (a decode stretch, backend.stretch) for the engine's own batch."""

    def append_steps_trusted(self, seqs: np.ndarray, tokens: np.ndarray) -> dict: ...


@runtime_checkable
class Snapshots(Protocol):
    """An allocator that can show its whole mutable state (pure caches aside) as one
    comparable value: the allocator checker then holds refused calls and queries to
    leaving all of it unchanged, not only what the interface shows."""

    def snapshot(self) -> object: ...


@runtime_checkable
class AdmitsWithWindowCap(Protocol):
    """An allocator that can answer vLLM's admission check for a model with sliding
    windows: whether a prompt fits when each window counts at most the blocks of its
    window, ``in_flight_tokens`` more tokens and one block (vLLM frees a window's blocks
    as the prompt's chunks are computed, so it holds no more than that)."""

    def can_admit(self, token_ids, *, salt: int = 0, in_flight_tokens: int) -> bool: ...


@runtime_checkable
class PeaksWithWindows(Protocol):
    """An allocator that can say the most blocks a request holds at its largest when its
    sequences grow by at most ``in_flight_tokens`` at a time: a sliding window then holds
    its window, those tokens and a block, not every block of the sequence (what decides
    whether a request can ever be served)."""

    def peak_blocks(
        self, shared_tokens: int, tokens: int, samples: int, *, in_flight_tokens: int
    ) -> int: ...


@runtime_checkable
class RetainsPrefixTails(Protocol):
    """An allocator whose sliding windows keep in the prefix cache only the blocks a later
    request can resume from (vLLM's sparse retention). Before a sequence is allocated,
    the engine asks how long a prefix of everything it will compute one KV cache group
    holds cached beyond the hit all groups serve (vLLM's shared-prefix junction, read at
    the lookup: the allocation may evict those very blocks); once it is allocated
    (perhaps a first chunk of it), the engine tells it that prefix and how many of its
    tokens are its prompt, whose end a request sending the same prompt resumes at."""

    def shared_prefix_tokens(self, token_ids, *, salt: int = 0) -> int: ...

    def retain_prefix_tails(
        self, seq_id: int, *, num_prompt_tokens: int, shared_prefix_tokens: int
    ) -> None: ...


@runtime_checkable
class ReleasesBehindProcessed(Protocol):
    """An allocator whose sliding windows release blocks only behind tokens whose step
    has finished: the engine says when it begins planning a step and whether the previous
    step is still in flight then (async scheduling), as vLLM frees a window's blocks on
    the processed-token basis."""

    def begin_step(self, *, lag: bool) -> None: ...


@runtime_checkable
class UnpublishesBlocks(Protocol):
    """An allocator whose prefix cache can take back the newest block a sequence
    published (vLLM registers a decode-filled block a step late under async scheduling)."""

    def unpublish_last_block(self, seq_id: int) -> None: ...


@runtime_checkable
class TakesExternalKV(Protocol):
    """An allocator a KV connector can work beside (backend/connectors/): it says which
    prefix keys a prompt has and how many of its blocks the device holds, allocates for
    blocks that arrive from outside, and hands over the full blocks computed since it
    last did (``backend.connectors.contract.ComputedBlock``)."""

    def prompt_keys(self, token_ids, *, salt: int = 0) -> tuple[list[int], int]:
        """The prefix keys of the prompt's full blocks, and how many of them, from the
        first, the device holds cached. No mutation."""
        ...

    def allocate(
        self,
        seq_id,
        token_ids,
        *,
        salt: int = 0,
        max_new_tokens: int = 0,
        computed_tokens: int | None = None,
        external_blocks: int = 0,
    ) -> int:
        """``Allocator.allocate``, the ``external_blocks`` blocks after the device's hit
        supplied from outside: taken fresh, holding the prompt's tokens, computed at once;
        the tokens returned count them."""
        ...

    def can_allocate(
        self, token_ids, *, salt: int = 0, max_new_tokens: int = 0, external_blocks: int = 0
    ) -> bool:
        """``Allocator.can_allocate`` of ``allocate`` with ``external_blocks``."""
        ...

    def record_computed_blocks(self) -> None:
        """From now on, remember the blocks computed (once per connector, at the start).
        Raises InvalidRequest where no connector can work beside this allocator."""
        ...

    def take_computed_blocks(self) -> list:
        """The full blocks computed since the last call that a table still holds, in the
        order they were computed."""
        ...
