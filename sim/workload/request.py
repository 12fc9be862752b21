"""A user request: what the workload generates and every later stage reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from backend.base import as_tokens


class PromptSource(Protocol):
    """Builds prompts by request id (:class:`~sim.workload.prompts.PromptBook`)."""

    def prompt(self, req_id: int) -> np.ndarray: ...


class GivenPrompt:
    """A prompt given as token ids (a test's, the live server's, a plug-in's), checked
    once here and kept as a contiguous int32 array: the engine hands it to the
    allocator's unchecked entry. Raises InvalidRequest (a ValueError) for an empty
    prompt or ids that are not integers in [0, 2**31 - 1]."""

    __slots__ = ("tokens",)

    def __init__(self, tokens: np.ndarray):
        self.tokens = as_tokens(tokens, allow_empty=False)

    def prompt(self, req_id: int) -> np.ndarray:
        return self.tokens


@dataclass(frozen=True, eq=False, slots=True, init=False)
class Request:
    """One user request as the workload generates it (immutable; what the engine
    observes of it is its :class:`~sim.engine.records.RequestOutcome`).

    ``Request(req_id, arrival_s, prompt, output_len, ...)`` keeps the token ids given;
    a generated request instead passes ``prompt=None`` with ``prompt_len`` and the
    ``source`` that builds them, so that a request holds no token array: ``prompt``
    builds a new one on every read (whoever needs it for long keeps it, as the engine
    does while the request is in flight)."""

    req_id: int
    arrival_s: float
    prompt_len: int
    output_len: int  # true number of tokens to generate (the oracle knows it)
    tenant: int  # also the prefix-cache salt unless sharing is opted in
    priority: int  # larger = more important
    prefix_group: int  # which shared system prompt, -1 = none
    session: int  # multi-turn session id, -1 = none
    turn: int
    n: int  # parallel samples (forked sequences sharing the prompt)
    source: PromptSource = field(repr=False)

    def __init__(
        self,
        req_id: int,
        arrival_s: float,
        prompt: np.ndarray | None = None,
        output_len: int | None = None,
        tenant: int = 0,
        priority: int = 0,
        prefix_group: int = -1,
        session: int = -1,
        turn: int = 0,
        n: int = 1,
        *,
        prompt_len: int | None = None,
        source: PromptSource | None = None,
    ):
        """Raises ValueError unless exactly one of ``prompt`` and ``source`` is given
        (``source`` with ``prompt_len``), or without ``output_len``. (Both have defaults
        only so that ``dataclasses.replace``, which passes fields by name, works.)"""
        if (prompt is None) == (source is None) or (source is not None and prompt_len is None):
            raise ValueError("a Request needs a prompt, or a source and a prompt_len")
        if output_len is None:
            raise ValueError("a Request needs an output_len")
        if prompt is not None:
            source = GivenPrompt(prompt)
            prompt_len = int(source.tokens.shape[0])
        # Frozen: fields are set past __setattr__, each by name (a new field cannot shift
        # the others), one call each (no dict built per request: a run makes millions).
        set_field = object.__setattr__
        set_field(self, "req_id", req_id)
        set_field(self, "arrival_s", arrival_s)
        set_field(self, "prompt_len", prompt_len)
        set_field(self, "output_len", output_len)
        set_field(self, "tenant", tenant)
        set_field(self, "priority", priority)
        set_field(self, "prefix_group", prefix_group)
        set_field(self, "session", session)
        set_field(self, "turn", turn)
        set_field(self, "n", n)
        set_field(self, "source", source)

    @property
    def prompt(self) -> np.ndarray:
        """The prompt's int32 token ids (built afresh for a generated request)."""
        return self.source.prompt(self.req_id)
