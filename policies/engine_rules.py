"""Engine profiles: a named set of policies plus the engine's own rules, which a scenario
selects in one line (``scheduler.engine``), each pinned to the engine version it was
checked against.

A profile fills the scheduler and preemption settings the scenario leaves unset (what
the scenario sets wins) with policies from the registries, and brings an
:class:`EngineRules`: what no policy decides, called by the engine at named points of a
step (when a scheduled chunk's blocks are offered to prefix lookups, whether the
admission watermark holds for a resumed request, how samples fan out, when a finished
sequence's blocks free, what a preemption takes back from the prefix cache, how many
blocks the pool never hands out). The base class is pagesim's own rules; an engine's
module overrides what its engine does differently (``policies/vllm_v1.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from backend.base import Allocator
from backend.capabilities import ReleasesBehindProcessed


class EngineRules:
    """pagesim's rules. Stateless: what a rule depends on (the scheduler's async
    setting) is passed to it, so the engine's configuration stays the one source."""

    #: Blocks of the pool the engine never hands out.
    reserved_blocks: ClassVar[int] = 0
    #: ``n > 1`` runs as n requests, each prefilled (the later ones hit the first one's
    #: prompt blocks), not one prefill whose samples fork.
    fan_out_samples: ClassVar[bool] = False

    # -- a prompt chunk's blocks -----------------------------------------------------------
    def chunk_scheduled(self, alloc: Allocator, seq_id: int, computed: int) -> None:
        """A chunk of ``seq_id`` got its slots this step; ``computed`` of its tokens will
        have KV once the step runs. pagesim offers them to lookups only once the whole
        step is planned (:meth:`step_planned`), so no request admitted in this step hits
        a chunk computed in it."""

    def step_planned(self, alloc: Allocator, chunks: Iterable[tuple[int, int]]) -> None:
        """Every chunk ``(seq_id, computed)`` of the step is scheduled: publish their full
        blocks (mutates the allocator's prefix cache)."""
        for seq_id, computed in chunks:
            alloc.mark_computed(seq_id, computed)

    # -- admission ---------------------------------------------------------------------------
    def window_admission_tokens(self, max_num_batched_tokens: int, async_scheduling: bool):
        """Tokens in flight a sliding window's share of an admission check covers (a
        window then counts at most those, its window and a block: see
        backend.capabilities.AdmitsWithWindowCap); None: every block the prompt fills,
        pagesim's rule."""
        return None

    def watermark_applies(self, resumed: bool) -> bool:
        """Whether the admission watermark holds for this request (it never does on an
        empty replica). pagesim waives it for resumed (preempted) requests."""
        return not resumed

    def step_begins(self, alloc: ReleasesBehindProcessed | None, async_scheduling: bool) -> None:
        """The engine begins planning a step; ``alloc``: the allocator if it counts steps
        (capabilities.ReleasesBehindProcessed; mutates its count), else None. pagesim:
        windows release behind every computed token, nothing to say."""
        pass

    # -- finished and preempted sequences --------------------------------------------------
    def frees_lag(self, async_scheduling: bool) -> bool:
        """Whether a sequence that finished in the step just ended keeps its blocks and
        its ``max_num_seqs`` slot until after the next step is planned."""
        return False

    def decodes_preempted(
        self, alloc: Allocator, seq_ids: list[int], async_scheduling: bool
    ) -> None:
        """Decoding sequences ``seq_ids`` are about to be freed by a preemption; undo what
        the engine would not have done yet (mutates the allocator). pagesim: nothing."""


@dataclass(frozen=True)
class EngineProfile:
    """A named engine: the section defaults it brings and its rules."""

    name: str
    checked_against: str  # the engine version the rules were held against ("" for pagesim)
    scheduler: dict[str, Any] = field(default_factory=dict)
    preemption: dict[str, Any] = field(default_factory=dict)
    #: preemption defaults when ``scheduler.policy`` is ``priority``
    priority_preemption: dict[str, Any] = field(default_factory=dict)
    #: what ``scheduler.policy: priority`` without params means under this engine
    priority_queue: str = "priority"
    rules: type[EngineRules] = EngineRules


PAGESIM = EngineProfile("pagesim", "")
