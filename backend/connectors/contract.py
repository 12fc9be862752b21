"""The KV connector contract: KV of a request kept somewhere outside one allocator's
device pool, which a scheduler asks about beside the allocator, as vLLM's scheduler asks
its scheduler-side KV connector (``vllm/distributed/kv_transfer/kv_connector/v1/base.py``).

A step of a scheduler with a connector (``seam.py`` carries it out):

1. **lookup**: the allocator says which prefix keys a prompt's full blocks have and how
   many of them the device holds; the connector says how many blocks after those it can
   supply (vLLM: ``get_num_new_matched_tokens``);
2. **allocate**: the allocator takes blocks for the whole prompt and counts the
   connector's blocks as computed (vLLM: ``allocate_slots`` with
   ``num_external_computed_tokens``);
3. **load**: the connector is told which device blocks its KV goes into and records the
   moves (vLLM: ``update_state_after_alloc``);
4. **store**: once per step the allocator hands over the full blocks computed since the
   last step and the connector returns its moves, loads to run before the step's forward
   and stores to run after it (vLLM: ``build_connector_meta``).

The allocator knows no connector: it offers the seam (``capabilities.TakesExternalKV``)
and any connector works beside it. The offload tiers (``offload.py``) are the first; a
prefill/decode peer link would be another.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from backend.base import KVGroup
from backend.transfer import Transfer


class ComputedBlock(NamedTuple):
    """A full device block whose KV a step computed, as the allocator hands it over:
    the block, the prefix key it is published under, the tenant salt and chain position
    of that key, its tokens (a read-only view of the allocator's memory) and the KV cache
    group whose table holds it."""

    block: int
    key: int
    salt: int
    position: int
    row: np.ndarray
    group: int = 0


class ConnectorTransfers(NamedTuple):
    """A step's moves through a connector: ``loads`` run before the step's forward (KV
    arriving into device blocks), ``stores`` after it (computed KV leaving them)."""

    loads: tuple[Transfer, ...]
    stores: tuple[Transfer, ...]


class KVConnector(ABC):
    """KV supplied to and taken from one allocator's device pool by something outside
    it. Methods are called in the order of the module docstring; ``matched_blocks``
    remembers its answer for the ``loaded`` that follows a successful allocation."""

    @abstractmethod
    def attach(self, kv_groups: Sequence[KVGroup]) -> None:
        """The allocator beside this connector keeps ``kv_groups`` (its ``kv_groups``):
        called once, when the seam is built, before anything else."""

    @abstractmethod
    def matched_blocks(
        self, keys: list[int], device_blocks: int, tokens: np.ndarray, salt: int, *, own=False
    ) -> int:
        """How many blocks of the prompt ``tokens`` (salt ``salt``, full blocks keyed
        ``keys``), after the first ``device_blocks`` the device holds, this connector can
        supply; never the block holding the prompt's last token. ``own``: count only what
        this instance holds, not a store a cluster shares (a router's view). No mutation
        but the remembered match."""

    @abstractmethod
    def loaded(self, keys: list[int], tables: list[list[int]]) -> None:
        """The prompt of the last ``matched_blocks`` (whose keys are ``keys``) was
        allocated: ``tables`` are each KV cache group's table entries for the matched
        blocks, in order (NULL_BLOCK where the group took none: a window reads only the
        blocks before the end; empty when it matched none). Records the loads
        ``take_transfers`` returns."""

    @abstractmethod
    def take_transfers(self, computed: list[ComputedBlock]) -> ConnectorTransfers:
        """The loads recorded since the last call, and the stores this connector makes of
        ``computed`` (the blocks computed since then, in the order they were)."""
