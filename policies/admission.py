"""Admission policies: how much of a prompt's KV must fit for its request to be admitted.

Asked by the engine when the scheduler offers a waiting request. ``whole-prompt``
(vLLM's rule) allocates the whole prompt at admission, so an admitted prompt never waits
for memory mid-prefill. ``first-chunk`` allocates only what this step computes of it and
lets later chunks take blocks as they run: more requests start sooner, at the risk of
partial prompts filling the pool (the engine then preempts one). ``whole-sequence``
(vLLM V1 with ``scheduler_reserve_full_isl``, its default) admits only if the whole
sequence would fit now but allocates, like ``first-chunk``, only the chunk it computes.
Both need chunked prefill and a paged pool; elsewhere the engine admits whole prompts.
"""

from __future__ import annotations

from typing import Protocol

from policies.registry import Registry

__all__ = ["ADMISSION", "AdmissionPolicy", "FirstChunk", "WholePrompt", "WholeSequence"]


class AdmissionPolicy(Protocol):
    #: True: a prompt is allocated whole at admission (the engine skips ``first_tokens``).
    whole_prompt: bool
    #: Admit only if the whole sequence's blocks are free now, though only
    #: ``first_tokens`` of it are allocated. A plug-in may leave it out (False).
    whole_sequence_must_fit: bool

    def first_tokens(self, prompt_tokens: int, cached_tokens: int, budget: int) -> int:
        """Tokens of a prompt (``cached_tokens`` of them already in the prefix cache) to
        allocate at admission, in ``[cached_tokens + 1, prompt_tokens]``, when the step has
        ``budget`` tokens left. Pure."""
        ...


ADMISSION: Registry = Registry(
    "admission",
    field="scheduler.admission",
    methods=("first_tokens",),
    flags=("whole_prompt",),
    optional_flags=("whole_sequence_must_fit",),
)


@ADMISSION.register("whole-prompt")
class WholePrompt:
    """The whole prompt's KV must fit now (vLLM)."""

    whole_prompt = True
    whole_sequence_must_fit = False

    def first_tokens(self, prompt_tokens: int, cached_tokens: int, budget: int) -> int:
        return prompt_tokens


@ADMISSION.register("first-chunk")
class FirstChunk:
    """Only the first chunk's KV must fit; later chunks take blocks as they run."""

    whole_prompt = False
    whole_sequence_must_fit = False

    def first_tokens(self, prompt_tokens: int, cached_tokens: int, budget: int) -> int:
        return min(prompt_tokens, cached_tokens + max(budget, 1))


@ADMISSION.register("whole-sequence")
class WholeSequence(FirstChunk):
    """The whole sequence must fit now, but only the first chunk is allocated (vLLM V1:
    ``allocate_slots(full_sequence_must_fit=True)``); later chunks allocate as they run
    and preempt when they cannot."""

    whole_sequence_must_fit = True
