"""The coordinator contract: what the paged manager asks of its KV cache groups' tables,
one class per shape of the model's KV, chosen once when the manager is built (as vLLM's
``get_kv_cache_coordinator`` picks one). The shapes:

* one full-attention group with a prefix cache (one_group.py, ``OneGroup``): most models,
  on the fast paths;
* one full-attention group without a prefix cache (``OneGroupNoCache``): no key is hashed,
  looked up or published;
* several groups, or a sliding window (kv_groups.py, ``KVGroups``).

The manager checks what callers pass in, keeps the sequences and their token counts,
ticks the pool's clock once per command and owns the swap space; a coordinator changes
the tables, the pool's blocks and the prefix indexes. Token counts are the caller's:
every method takes what a sequence holds and never changes it. A command that raises
OutOfBlocks changes nothing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from backend.blocks.group_tables import GroupTables
from backend.transfer import Transfer


class Coordinator(ABC):
    """The commands of one shape of KV cache groups (see the module docstring)."""

    #: the groups' managers, in the order the model's groups are numbered
    groups: list[GroupTables]

    # -- prefix hits -----------------------------------------------------------------------
    @abstractmethod
    def prompt_keys(self, tokens: np.ndarray, salt: int) -> tuple[list[int], int]:
        """The prompt's full-block keys and how many of its leading blocks every group
        holds cached (none without a prefix cache). No mutation but the lookup memos."""

    def shared_prefix_blocks(self, tokens: np.ndarray, salt: int) -> int:
        """Blocks of the longest prefix one group holds cached when that is longer than
        the hit every group serves (0: none, as with one group)."""
        return 0

    def retain_tails(self, seq: int, prompt_tokens: int, shared_blocks: int) -> None:
        """``seq`` has a prompt of ``prompt_tokens`` and a shared prefix of
        ``shared_blocks`` found at its lookup: a window that keeps only the tails a later
        request can resume at keeps these (nothing to do without one)."""
        return None

    # -- allocation ------------------------------------------------------------------------
    @abstractmethod
    def can_allocate(
        self, tokens: np.ndarray, salt: int, in_flight: int | None = None, external: int = 0
    ) -> bool:
        """Whether ``allocate`` would succeed; ``in_flight``: the engine's cap on what a
        window holds of a prompt prefilled in chunks (None: none). No mutation."""

    @abstractmethod
    def allocate(
        self, seq: int, tokens: np.ndarray, salt: int, computed: int | None, external: int = 0
    ) -> int:
        """Give new sequence ``seq`` its tables for ``tokens``, the hit shared and
        ``external`` blocks after it counted computed (a KV connector supplies them).
        Returns the hit and the external blocks in tokens. Raises OutOfBlocks."""

    @abstractmethod
    def peak_blocks(self, shared_tokens: int, tokens: int, samples: int, in_flight: int) -> int:
        """The most blocks ``samples`` forks of ``tokens`` tokens sharing the first
        ``shared_tokens`` hold at once, growing by ``in_flight`` tokens at most at a time."""

    # -- computed KV -----------------------------------------------------------------------
    def begin_step(self, lag: bool) -> None:
        """A step's planning begins; ``lag``: the one before is still in flight (a
        window releases behind what is processed; nothing to do without one)."""
        return None

    @abstractmethod
    def mark_computed(self, seq: int, count: int) -> None:
        """``seq`` (on the device) has the KV of its first ``count`` held tokens: its full
        blocks among them are published."""

    @abstractmethod
    def unpublish_last(self, seq: int) -> None:
        """Withdraw ``seq``'s full last block from the prefix cache if it published it."""

    # -- growth ----------------------------------------------------------------------------
    @abstractmethod
    def can_append(self, seq: int, held: int, num_new: int) -> bool: ...

    @abstractmethod
    def append(self, seq: int, held: int, tokens: np.ndarray) -> list[Transfer]:
        """Grow ``seq`` (holding ``held``) by ``tokens``, ticking the pool's clock when it
        does; returns the copies made."""

    @abstractmethod
    def batch_need(self, seqs: np.ndarray, held: np.ndarray) -> int:
        """Blocks one decode step of ``seqs`` takes."""

    @abstractmethod
    def append_batch(self, seqs: np.ndarray, held: np.ndarray, tokens: np.ndarray):
        """One decode step of ``seqs``, a token each; returns the copies made."""

    @abstractmethod
    def plain_decode_steps(self, seqs: np.ndarray, held: np.ndarray, limit: int) -> int:
        """How many of the next ``limit`` decode steps run without copy or eviction."""

    @abstractmethod
    def append_steps(self, seqs: np.ndarray, held: np.ndarray, tokens: np.ndarray) -> dict:
        """A ``(steps, len(seqs))`` grid of decode tokens; returns the usage by step."""

    # -- sharing and release ---------------------------------------------------------------
    @abstractmethod
    def fork(self, parent: int, child: int) -> None:
        """``child`` shares every table of ``parent``."""

    @abstractmethod
    def free(self, seq: int, held: int, swapped: bool) -> list[int]:
        """Drop ``seq``'s tables (it held ``held`` tokens) and its index entries; its
        device references go back to the pool. ``swapped``: its one table holds the
        swap space's CPU blocks, returned untouched for the caller to free."""

    # -- queries and invariants ------------------------------------------------------------
    @abstractmethod
    def tables(self, seq: int) -> tuple[list[int], ...]: ...

    @abstractmethod
    def held_blocks(self, seq: int) -> int:
        """Device blocks the tables of ``seq`` (on the device) hold."""

    @abstractmethod
    def read(self, seq: int, held: int, group: int, memory: np.ndarray) -> np.ndarray:
        """The token ids ``seq`` reads through group ``group``'s table from ``memory``
        (the device's, or the swap space's for a swapped sequence); -1 where a window
        released the block. No mutation."""

    @abstractmethod
    def check(self, on_device: list[int], num_tokens: np.ndarray, read_tokens) -> None:
        """Assert the tables, the indexes and the pool against the tables (AssertionError
        names the break); ``read_tokens(seq, group)`` reads a sequence back."""

    @abstractmethod
    def snapshot_state(self) -> tuple: ...
