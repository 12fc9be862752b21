"""One KV cache group of full-attention layers: every token's KV is kept, so a sequence
holding ``n`` tokens holds ``ceil(n / block_size)`` blocks and no block leaves its table
before the sequence does (the tables and their growth: group_tables.py)."""

from __future__ import annotations

import numpy as np

from backend.blocks.group_tables import GroupTables


class FullAttention(GroupTables):
    """The block tables of one full-attention KV cache group."""

    releases_behind = False

    def most_held(self, num_tokens: int, in_flight: int | None) -> int:
        """Every block of the sequence, however it computes."""
        return self.blocks_for(num_tokens)

    def cached_run(
        self, keys: list[int], salt: int, tokens: np.ndarray, limit: int, known=None
    ) -> list[int]:
        """The cached blocks of the prompt's leading full blocks, in order."""
        run = known if known is not None else self.index.hits_of(keys, tokens, salt)
        return run[:limit]

    def first_needed(self, end: int) -> int:
        """0: full attention reads every block."""
        return 0

    def first_held(self, seq: int) -> int:
        """0: full attention keeps every block."""
        return 0

    def check_released(self, seq: int, table: list[int], held: int) -> None:
        """Nothing is ever released here."""
