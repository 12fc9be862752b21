"""What a scheduler does with an allocator and the KV connector beside it (contract.py's
steps), in one place: the engine's planner, its view and the allocator state machines
all go through it, so a connector meets every allocator the same way. Admission checks
count the connector's blocks too: a sliding window takes none for those it will not
read."""

from __future__ import annotations

import numpy as np

from backend.base import as_tokens
from backend.capabilities import TakesExternalKV
from backend.connectors.contract import ConnectorTransfers, KVConnector


class ConnectorSeam:
    """``alloc`` with ``connector`` beside it. Raises InvalidRequest for an allocator that
    cannot take KV from outside (no prefix cache, or a layout it does not hand over)."""

    def __init__(self, alloc: TakesExternalKV, connector: KVConnector):
        alloc.record_computed_blocks()
        connector.attach(alloc.kv_groups)
        self.alloc = alloc
        self.connector = connector
        self.block_size = alloc.block_size

    def cached_prefix_tokens(self, token_ids, *, salt: int = 0, own: bool = False) -> int:
        """Tokens of the prompt's longest prefix the device and the connector hold
        together, the connector's run continuing from the device's first miss; ``own``:
        without what the connector shares with other instances. No mutation (but the
        connector's remembered match)."""
        tokens = as_tokens(token_ids, allow_empty=False)
        keys, device = self.alloc.prompt_keys(tokens, salt=salt)
        matched = self.connector.matched_blocks(keys, device, tokens, salt, own=own)
        return (device + matched) * self.block_size

    def held_prefix_tokens(self, token_ids, *, salt: int = 0) -> int:
        """``cached_prefix_tokens`` of what this instance holds itself."""
        return self.cached_prefix_tokens(token_ids, salt=salt, own=True)

    def allocate(
        self, seq_id: int, tokens: np.ndarray, salt: int, computed_tokens: int | None = None
    ) -> int:
        """``alloc.allocate`` of a prompt, with the blocks the connector supplies counted
        computed and loaded into the blocks taken for them. Returns the tokens cached on
        the device or loaded. Raises OutOfBlocks (nothing changed anywhere) like
        ``allocate``."""
        keys, device = self.alloc.prompt_keys(tokens, salt=salt)
        external = self.connector.matched_blocks(keys, device, tokens, salt)
        cached = self.alloc.allocate(
            seq_id, tokens, salt=salt, computed_tokens=computed_tokens, external_blocks=external
        )
        tables = self.alloc.block_tables(seq_id) if external else ()
        self.connector.loaded(keys, [table[device : device + external] for table in tables])
        return cached

    def can_allocate(self, token_ids, *, salt: int = 0, max_new_tokens: int = 0) -> bool:
        """``alloc.can_allocate`` of a prompt with the blocks the connector supplies."""
        tokens = as_tokens(token_ids, allow_empty=False)
        external = self._external(tokens, salt)
        return self.alloc.can_allocate(
            tokens, salt=salt, max_new_tokens=max_new_tokens, external_blocks=external
        )

    def can_admit(self, token_ids, *, salt: int = 0, in_flight_tokens: int) -> bool:
        """``alloc.can_admit`` (capabilities.AdmitsWithWindowCap) of a prompt with the
        blocks the connector supplies."""
        tokens = as_tokens(token_ids, allow_empty=False)
        external = self._external(tokens, salt)
        return self.alloc.can_admit(
            tokens, salt=salt, in_flight_tokens=in_flight_tokens, external_blocks=external
        )

    def _external(self, tokens: np.ndarray, salt: int) -> int:
        keys, device = self.alloc.prompt_keys(tokens, salt=salt)
        return self.connector.matched_blocks(keys, device, tokens, salt)

    def take_transfers(self) -> ConnectorTransfers:
        """The connector's moves since the last call (once per planned step): loads to run
        before the step's forward, stores of the blocks computed since, after it."""
        return self.connector.take_transfers(self.alloc.take_computed_blocks())
