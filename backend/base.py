"""The allocator interface: bookkeeping of KV-cache slots for sequences.

Every allocator (the paged block manager, the contiguous baselines) implements
:class:`Allocator`. The contract, shared by all of them:

* Sequence ids are non-negative ints chosen by the caller and unique among live
  sequences. Token ids are non-negative ints (stored as int32).
* Queries (`can_*`, `block_table`, `usage`, ...) never mutate anything.
* Commands come in pairs with a query (`can_allocate` / `allocate`, `can_append` /
  `append`, ...). A command that is refused for lack of memory raises
  :class:`OutOfBlocks` *before* mutating anything: the allocator is left exactly as it
  was, bit for bit. A free-list miss is not a bug; what happens next (queue, preempt,
  swap, evict, reject) is policy, decided by the caller.
* Commands that need data to move (copy-on-write, swap) *return* the moves as a list
  of :class:`~backend.transfer.Transfer` for an executor to perform, in order, before
  the step runs. Each names its route: copies and growth go GPU -> GPU, ``swap_out``
  GPU -> CPU, ``swap_in`` CPU -> GPU.
* Misuse (unknown id, double free, forking onto a live id, a non-positive size) raises
  a subclass of ``ValueError`` or ``KeyError`` with a message; never silent corruption.
* ``check_invariants()`` verifies the whole state and raises ``AssertionError`` on a
  broken invariant (a bug); property tests call it after every step.

An allocator pagesim did not write (``cache.allocator: module:Class`` in a scenario,
``pagesim check-allocator``) is built through :class:`AllocatorFactory`: called with
the keyword arguments ``num_blocks``, ``block_size``, ``num_cpu_blocks`` and
``enable_prefix_caching``, it returns a new, empty allocator. Its class says what it
can do through two class attributes, read before it is built (see :class:`Allocator`):
``supports_prefix_caching`` and ``block_table_layout``. ``backend.testing`` checks
this whole contract on any allocator.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar, Literal, NamedTuple, Protocol

import numpy as np

from backend.capabilities import hide_bypassed_unchecked_forms
from backend.transfer import Transfer

#: a block table entry that holds no block: a sliding window released it (its tokens are
#: out of the window of every token the sequence computes from now on)
NULL_BLOCK = -1


class KVGroup(NamedTuple):
    """One KV cache group as an allocator that keeps several takes it (``kv_groups``):
    layers of one attention type whose KV has one geometry, so one block table serves
    them all (vLLM's KV cache groups). ``sliding_window``: the window in tokens of a
    sliding-window group; None for full attention. ``retention_interval`` (a window's
    only, vLLM's ``prefix_cache_retention_interval``): which of its full blocks the
    prefix cache keeps. None keeps every one (dense); 0 only the window's blocks before
    the points a later request can resume at (the prompt's end, a shared prefix's end);
    a positive multiple of the block size also those before every multiple of it."""

    sliding_window: int | None = None
    retention_interval: int | None = None

    def describe(self) -> str:
        window = self.sliding_window
        return "full attention" if window is None else f"sliding window of {window} tokens"


#: the KV cache groups of a model whose layers all keep every token
ONE_GROUP = (KVGroup(),)


class OutOfBlocks(RuntimeError):
    """A free-list miss: the request needs more blocks (or slots) than are free.

    Raised before any mutation. ``needed`` and ``available`` are in the allocator's
    unit (blocks for the paged manager, token slots for contiguous baselines).
    """

    def __init__(self, message: str, *, needed: int = 0, available: int = 0):
        super().__init__(message)
        self.needed = needed
        self.available = available


class UnknownSequence(KeyError):
    """The sequence id is not live in this allocator."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else "unknown sequence"


class DuplicateSequence(ValueError):
    """The sequence id is already live (allocate or fork onto an existing id)."""


class InvalidRequest(ValueError):
    """A size or argument that can never be valid (zero or negative, wrong shape)."""


class KVUsage(NamedTuple):
    """Split of the device KV pool in token slots.

    ``token_slots + reserved_slots + internal_frag_slots + external_frag_slots +
    free_slots == total_slots``. ``cached_slots`` (slots of cached-evictable prefix
    blocks, reusable but reclaimable) are counted inside ``free_slots``.

    * token_slots: slots holding a token of a live sequence (a shared block counts once)
    * reserved_slots: slots reserved for tokens a live request will still write
    * internal_frag_slots: slots allocated to a request that will never hold a token
      (paged: the unused tail of partly filled blocks; contiguous: over-reservation)
    * external_frag_slots: free slots in holes too small for the next request
    * free_slots: everything else; ``evictions``: cached blocks ever evicted (not a split)
    """

    total_slots: int
    token_slots: int
    reserved_slots: int
    internal_frag_slots: int
    external_frag_slots: int
    free_slots: int
    cached_slots: int
    used_blocks: int
    cached_blocks: int
    free_blocks: int
    evictions: int = 0


# -- argument checks shared by the allocators (misuse raises InvalidRequest) -------------
INT32_MAX = int(np.iinfo(np.int32).max)


def check_count(name: str, value: int, minimum: int) -> int:
    """``value`` as an int; InvalidRequest unless it is an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise InvalidRequest(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def indexes(value: object, length: int) -> bool:
    """Whether ``value`` is an integer (not a bool) in ``[0, length)``: a sequence id that
    indexes an allocator's per-sequence arrays. A float or a string never does."""
    return (
        not isinstance(value, bool) and isinstance(value, int | np.integer) and 0 <= value < length
    )


def grow_arrays(owner: object, names: tuple[str, ...], needed: int) -> None:
    """Grow ``owner``'s 1-D numpy attributes ``names`` (zero-filled, at least doubling, so
    the amortised cost per new sequence id is O(1)) to at least ``needed`` entries."""
    current = getattr(owner, names[0]).shape[0]
    if needed <= current:
        return
    size = max(needed, 2 * current, 64)
    for name in names:
        old = getattr(owner, name)
        new = np.zeros(size, old.dtype)
        new[: old.shape[0]] = old
        setattr(owner, name, new)


def as_tokens(token_ids: Sequence[int] | np.ndarray, *, allow_empty: bool = False) -> np.ndarray:
    """Token ids as a contiguous 1-D int32 array; raises InvalidRequest on bad input."""
    tokens = np.asarray(token_ids)
    if tokens.ndim != 1:
        raise InvalidRequest(f"token ids must be 1-D, got shape {tokens.shape}")
    if tokens.size == 0:
        if allow_empty:
            return tokens.astype(np.int32)
        raise InvalidRequest("empty prompt: a sequence needs at least one token")
    if tokens.dtype.kind not in "iu":
        raise InvalidRequest(f"token ids must be integers, got dtype {tokens.dtype}")
    # numpy reductions cost microseconds on tiny arrays; a decode append has one token.
    if tokens.size <= 16:
        values = tokens.tolist()
        low, high = min(values), max(values)
    else:  # int32 ids (the engine's) cannot exceed the range: one reduction, not two
        low = tokens.min()
        high = INT32_MAX if tokens.dtype == np.int32 else tokens.max()
    if low < 0 or high > INT32_MAX:
        raise InvalidRequest("token ids must be in [0, 2**31 - 1]")
    return np.ascontiguousarray(tokens, dtype=np.int32)


class Allocator(ABC):
    """KV-cache bookkeeping for a set of live sequences (see the module docstring).

    Optional capabilities are declared by having their methods, and the engine checks
    them with ``isinstance`` against their Protocols (``backend.capabilities``,
    ``backend.stretch.DecodeStretches``). A subclass overriding a command loses the
    unchecked form it inherited (``backend.capabilities.UNCHECKED_FORMS``)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        hide_bypassed_unchecked_forms(cls)

    # -- capabilities: class attributes, read before an instance is built -----------------
    #: Whether ``enable_prefix_caching=True`` at construction turns a prefix cache on
    #: (``allocate`` may then return cached tokens). False: ``allocate`` and
    #: ``cached_prefix_tokens`` always answer 0, whatever was asked. A scenario's
    #: ``cache.prefix_caching`` needs an allocator that supports it.
    supports_prefix_caching: ClassVar[bool] = False
    #: How ``block_table`` and a :class:`Transfer`'s ids read. ``"blocks"``: one physical
    #: block id per ``block_size`` tokens, in logical order; a move copies a whole block.
    #: ``"region"`` (the contiguous baselines): ``[first slot, length]`` of one region,
    #: ``block_size`` is 1 and a move copies one slot.
    block_table_layout: ClassVar[Literal["blocks", "region"]] = "blocks"
    #: Whether a KV connector (backend/connectors/: the offload tiers) can work beside
    #: it: it is ``backend.capabilities.TakesExternalKV`` with prefix caching on.
    supports_kv_connector: ClassVar[bool] = False

    #: token slots per block (1 for allocators that are not block based)
    block_size: int
    #: device blocks in the pool
    num_blocks: int
    #: blocks of the CPU swap pool (same unit as ``num_blocks``)
    num_cpu_blocks: int

    @property
    @abstractmethod
    def num_free_cpu_blocks(self) -> int:
        """Free blocks of the CPU swap pool (for contiguous allocators possibly split
        into holes: see ``can_swap_out``)."""

    @property
    @abstractmethod
    def peak_used_blocks(self) -> int:
        """The most device blocks (slots, for allocators that are not block based) held
        by live sequences at once since construction; never below the current use."""

    # -- allocation ------------------------------------------------------------------
    @abstractmethod
    def can_allocate(
        self, token_ids: Sequence[int] | np.ndarray, *, salt: int = 0, max_new_tokens: int = 0
    ) -> bool:
        """Whether ``allocate`` with these arguments would succeed now. No mutation."""

    @abstractmethod
    def allocate(
        self,
        seq_id: int,
        token_ids: Sequence[int] | np.ndarray,
        *,
        salt: int = 0,
        max_new_tokens: int = 0,
        computed_tokens: int | None = None,
    ) -> int:
        """Give new sequence ``seq_id`` the slots for its prompt ``token_ids``.

        ``max_new_tokens`` is the number of tokens the request will still append (used
        by reserving allocators; the paged manager ignores it). ``salt`` separates
        tenants: prefixes are shared only between equal salts. ``computed_tokens`` says
        how many leading tokens have their KV computed once this call returns (None:
        all); only those may be offered to other sequences by the prefix cache, the rest
        after ``mark_computed``.

        Returns the number of leading prompt tokens whose KV was found in the prefix
        cache (a multiple of ``block_size``, never covering the last prompt token; 0
        without prefix caching).
        Mutates: the free list, the new block table, refcounts, the prefix cache.
        Raises: OutOfBlocks (nothing changed), DuplicateSequence, InvalidRequest.
        """

    def mark_computed(self, seq_id: int, num_tokens: int) -> None:  # noqa: B027
        """The KV of ``seq_id``'s first ``num_tokens`` tokens is computed (or is being
        computed this step): a prefix cache may now offer those blocks to others.
        Allocators without a prefix cache ignore it."""

    @abstractmethod
    def cached_prefix_tokens(self, token_ids: Sequence[int] | np.ndarray, *, salt: int = 0) -> int:
        """Leading tokens of ``token_ids`` whose KV is in the prefix cache. No mutation,
        not counted in the hit statistics."""

    # -- growth ------------------------------------------------------------------------
    @abstractmethod
    def can_append(self, seq_id: int, num_tokens: int = 1) -> bool:
        """Whether ``append`` of ``num_tokens`` tokens to ``seq_id`` would succeed now."""

    @abstractmethod
    def append(self, seq_id: int, token_ids: Sequence[int] | np.ndarray) -> list[Transfer]:
        """Append tokens to a live sequence, taking new blocks only when the last is full.

        Returns the copy-on-write moves needed, GPU -> GPU (a shared, partly filled
        last block is copied to a private block before it is written).
        Raises: OutOfBlocks (nothing changed), UnknownSequence.
        """

    @abstractmethod
    def append_batch(self, seq_ids: np.ndarray, token_ids: np.ndarray) -> list[Transfer]:
        """Append one token to each sequence of ``seq_ids`` (the decode step; hot path).

        All or nothing: if the blocks needed by the whole batch are not available,
        raises OutOfBlocks with nothing changed. Returns the copy-on-write moves.
        Raises: UnknownSequence, InvalidRequest (duplicate ids, shape mismatch).
        """

    @abstractmethod
    def blocks_needed_for_batch(self, seq_ids: np.ndarray) -> int:
        """Blocks (or slots) ``append_batch(seq_ids, ...)`` would take now. No mutation."""

    # -- sharing and release -----------------------------------------------------------
    @abstractmethod
    def fork(self, parent_id: int, child_id: int) -> list[Transfer]:
        """Create ``child_id`` reading the same tokens as ``parent_id``.

        Paged: shares every block (refcounts up, no copy, returns []). Contiguous:
        reserves a new region and returns the slot copies.
        Raises: UnknownSequence, DuplicateSequence, OutOfBlocks (nothing changed).
        """

    @abstractmethod
    def free(self, seq_id: int) -> None:
        """Release a live sequence (device or swapped). Shared blocks are released when
        their last reference drops; full blocks under prefix caching stay cached and
        evictable. Raises: UnknownSequence (including a double free)."""

    # -- swap ----------------------------------------------------------------------------
    @abstractmethod
    def can_swap_out(self, *seq_ids: int) -> bool:
        """Whether all of these (distinct, live) sequences are on the device and the CPU
        pool has room for them, swapped out one after another in this order (a request's
        samples leave together). No mutation; raises UnknownSequence."""

    @abstractmethod
    def swap_out(self, seq_id: int) -> list[Transfer]:
        """Move a sequence's KV to the CPU pool; its device blocks are released.

        Returns the moves, GPU -> CPU. Raises OutOfBlocks (CPU pool full,
        nothing changed), UnknownSequence, InvalidRequest (already swapped out)."""

    @abstractmethod
    def can_swap_in(self, *seq_ids: int) -> bool:
        """Whether all of these (distinct, live) sequences are swapped out and the device
        pool has room to bring them back, one after another in this order (a request's
        samples return together). A yes guarantees every ``swap_in`` succeeds. No
        mutation; raises UnknownSequence."""

    @abstractmethod
    def swap_in(self, seq_id: int) -> list[Transfer]:
        """Bring a swapped-out sequence back to the device; returns the moves, CPU -> GPU.
        Its tokens whose KV is not computed yet (a prompt swapped out mid-prefill: see
        ``allocate``'s ``computed_tokens`` and ``mark_computed``) come back in blocks no
        other sequence holds, since the caller computes them in place.
        Raises OutOfBlocks (device full, nothing changed), UnknownSequence,
        InvalidRequest (not swapped out)."""

    # -- queries ---------------------------------------------------------------------------
    @abstractmethod
    def is_swapped(self, seq_id: int) -> bool:
        """Whether a live sequence currently lives in the CPU pool."""

    @abstractmethod
    def num_tokens(self, seq_id: int) -> int:
        """Tokens held by a live sequence."""

    @abstractmethod
    def block_table(self, seq_id: int) -> list[int]:
        """Physical block ids (CPU block ids while swapped out) of a live sequence, in
        logical order. For contiguous allocators: the region's first slot and length."""

    @property
    def kv_groups(self) -> tuple[KVGroup, ...]:
        """The KV cache groups this allocator keeps a block table for, in group order.
        Layers whose KV has one attention type and geometry form a group (vLLM's KV
        cache groups: full attention, a sliding window); every group draws from the one
        pool ``usage`` splits, and a :class:`~backend.transfer.Transfer`'s ``group``
        indexes them. One full-attention group unless built with others."""
        return ONE_GROUP

    @property
    def num_kv_groups(self) -> int:
        return len(self.kv_groups)

    def block_tables(self, seq_id: int) -> tuple[list[int], ...]:
        """One block table per KV cache group, in group order; group 0's is
        ``block_table(seq_id)``. A sliding-window group's table holds NULL_BLOCK where
        it released a block. No mutation; raises UnknownSequence."""
        return (self.block_table(seq_id),)

    @abstractmethod
    def held_blocks(self, seq_id: int) -> int:
        """Device blocks (token slots, for allocators that are not block based) a live
        sequence holds; 0 while it is swapped out. A shared block counts for every
        sequence that holds it."""

    @abstractmethod
    def read_tokens(self, seq_id: int) -> np.ndarray:
        """The token ids a sequence reads back through its block table (the model's
        "memory"); equals everything given to it by allocate/append."""

    @abstractmethod
    def usage(self, next_request_tokens: int = 0) -> KVUsage:
        """The pool split in slots (the one pool every KV cache group draws from).
        ``next_request_tokens`` is the size of the request at the head of the queue,
        which decides what counts as external fragmentation for contiguous allocators."""

    # -- sizes: what a number of tokens takes, in this allocator's own units ------------
    # The engine asks in tokens and gets blocks (slots, for an allocator that is not
    # block based): it never does block arithmetic itself. The defaults count whole
    # ``block_size`` blocks in every KV cache group (each group holds a table of the
    # same tokens); an allocator with other units answers for itself. A sliding window's
    # releases are not credited: for a sequence whose window has passed a block these
    # are upper bounds. Queries: nothing is mutated.
    def blocks_for_tokens(self, tokens: int) -> int:
        """Blocks ``tokens`` tokens of a new sequence take (nothing shared)."""
        return self.num_kv_groups * -(-tokens // self.block_size)  # (integer ceil)

    def blocks_to_grow(self, held: int, target: int) -> int:
        """More blocks a sequence holding slots for ``held`` tokens needs to hold
        ``target`` (0 if it already does)."""
        size = self.block_size
        return self.num_kv_groups * max(0, -(-target // size) - -(-held // size))

    def tokens_that_fit(self, held: int, blocks: int) -> int:
        """Tokens a sequence holding slots for ``held`` can add with ``blocks`` more
        blocks (the free room of its last block included)."""
        return (-held) % self.block_size + blocks // self.num_kv_groups * self.block_size

    def blocks_for_samples(self, shared_tokens: int, tokens: int, samples: int) -> int:
        """Blocks ``samples`` sequences of ``tokens`` tokens each take when the first
        ``shared_tokens`` of them are one shared prefix (forks of one prompt: its full
        blocks are held once)."""
        shared = self.num_kv_groups * (shared_tokens // self.block_size if samples > 1 else 0)
        return shared + samples * (self.blocks_for_tokens(tokens) - shared)

    def available_blocks(self) -> int:
        """Blocks a command could take now: free plus cached-evictable (``usage()``'s
        ``free_blocks + cached_blocks``; an allocator may answer it more cheaply)."""
        usage = self.usage()
        return usage.free_blocks + usage.cached_blocks

    @abstractmethod
    def check_invariants(self) -> None:
        """Verify the whole state; raise AssertionError on any broken invariant."""


class AllocatorFactory(Protocol):
    """How pagesim builds an allocator it did not write: a callable taking exactly these
    keyword arguments and returning a new, empty :class:`Allocator`. An Allocator
    subclass whose ``__init__`` takes them (as :class:`backend.blocks.BlockManager`'s
    does) is one.

    ``num_blocks`` device blocks of ``block_size`` token slots (a region-layout
    allocator gets ``num_blocks * block_size`` slots), ``num_cpu_blocks`` CPU swap
    blocks of the same size (0: no swap space), and ``enable_prefix_caching``, passed
    True only to a class whose ``supports_prefix_caching`` is True."""

    def __call__(
        self,
        *,
        num_blocks: int,
        block_size: int,
        num_cpu_blocks: int,
        enable_prefix_caching: bool,
    ) -> Allocator: ...


class ReservingAllocator(Allocator):
    """An allocator that reserves a request's whole KV up front (the contiguous
    baselines), so a request whose reservation exceeds the pool can never be admitted:
    callers size it with ``reservation_size`` and reject it instead of waiting forever.
    Allocators that take memory as sequences grow (the paged manager) are not this."""

    @abstractmethod
    def reservation_size(self, prompt_len: int, max_new_tokens: int) -> int:
        """Blocks (slots) ``allocate`` reserves for a prompt of ``prompt_len`` tokens that
        will append ``max_new_tokens`` more. No mutation. Raises InvalidRequest for a
        negative or non-integer length."""
