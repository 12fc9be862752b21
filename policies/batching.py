"""Batching modes: which kinds of work one engine step may hold.

Every step the engine asks the replica's mode to *compose* the step from three moves,
in the order the mode calls them (each at most once per step):

* ``step.decodes()``: every running sequence in its decode phase gets one token (it may
  preempt another request when the KV pool runs out);
* ``step.running_prefills()``: prompts already admitted get their next chunk;
* ``step.admit(only=None, beyond_budget=False)``: waiting requests are admitted, in the
  scheduler's order, into what is left of the token budget; ``only(request)`` may
  restrict which, and ``beyond_budget`` admits past a spent budget (those prompts run
  in the next steps);
* ``step.running()``: instead of the first two, every running sequence in the order it
  was admitted gets its decode token or its next prompt chunk from the budget, as vLLM
  V1's running loop does (a long chunk early in the list can leave later decodes
  waiting a step; a miss preempts the victim policy's pick, and a victim that had not
  had its turn loses it).

A mode also says whether prompts may be cut into chunks (``chunks_prompts``; the
scenario's ``scheduler.chunked_prefill`` must allow it too). Without chunking a prompt is
admitted only when all of it fits what is left of the step's token budget, or runs alone.

The modes users compare (Vidur models several of them as replica schedulers):

* ``mixed`` (default; vLLM V1, Sarathi-Serve): decodes, then chunks of running and new
  prompts under the token budget, in one step.
* ``prefill-first`` (vLLM before chunked prefill, Orca-style admission): a step holds
  either prompts or decodes, never both; whenever a prompt can be admitted, it runs
  first and the decodes wait a step.
* ``decode-first``: decodes every step; new prompts only into the budget the decodes
  leave, whole (no chunking).
* ``vllm-v1`` (vLLM V1's ``Scheduler.schedule``): the running sequences in admission
  order, then, only if that preempted nothing, new prompts.
* ``static`` (request-level batching, as in FasterTransformer or early TGI): a batch of
  up to ``max_num_seqs`` requests (as memory allows) is formed when the replica is
  empty and runs until all its requests finish; nothing new is admitted meanwhile (a
  member preempted by recompute may come back).

Policies never import the engine: the step builder is the :class:`StepBuilder` protocol
(policies/views.py).
"""

from __future__ import annotations

from policies.registry import Registry
from policies.views import BatchingMode, StepBuilder
from policies.vllm_v1 import VllmV1

__all__ = ["BATCHING", "BatchingMode", "StepBuilder"]


BATCHING: Registry = Registry(
    "batching",
    field="scheduler.batching",
    methods=("compose",),
    flags=("chunks_prompts",),
    optional_flags=("decode_stretches",),
)


@BATCHING.register("mixed")
class Mixed:
    """Decodes, running prompt chunks and new prompts share each step's token budget."""

    chunks_prompts = True
    decode_stretches = True

    def compose(self, step: StepBuilder) -> None:
        step.decodes()
        step.running_prefills()
        step.admit()


@BATCHING.register("prefill-first")
class PrefillFirst:
    """A step of whole prompts whenever one can be admitted, else a step of decodes."""

    chunks_prompts = False
    decode_stretches = True

    def compose(self, step: StepBuilder) -> None:
        step.running_prefills()
        step.admit()
        if not step.has_prefill_chunks:
            step.decodes()


@BATCHING.register("decode-first")
class DecodeFirst(Mixed):
    """Every decode each step; whole prompts only in the budget the decodes leave: the
    mixed step without chunking."""

    chunks_prompts = False


BATCHING.register("vllm-v1")(VllmV1)  # the vllm-v1 engine profile's mode (its module)


@BATCHING.register("static")
class Static:
    """Request-level batching: admit a batch into an empty replica, then nothing new
    until every member has finished."""

    chunks_prompts = True
    decode_stretches = True  # with nothing waiting, admit() is a no-op: decodes only

    def __init__(self) -> None:
        self._members: set[int] = set()

    def compose(self, step: StepBuilder) -> None:
        step.decodes()
        step.running_prefills()
        if step.replica_empty:
            # The whole batch, up to max_num_seqs and memory, is formed now; prompts the
            # step's budget cannot hold yet are computed in the next steps.
            self._members = {request.req_id for request in step.admit(beyond_budget=True)}
        else:
            step.admit(only=lambda request: request.req_id in self._members)
