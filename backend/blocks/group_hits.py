"""The longest prefix every KV cache group serves (kv_groups.py asks it for a prompt).

Full attention serves any prefix of its cached run; a sliding window serves a length only
if the blocks holding the window before it are cached (sliding_window.py). The lengths
only shrink as the groups are asked in turn, so asking until no group shrinks it settles
on the longest common hit, as vLLM's hybrid coordinator iterates
(``HybridKVCacheCoordinator.find_longest_cache_hit``). Full attention is asked first, as
there: its answer, the whole prefix it holds, is also the shared prefix a window may lack,
whose end a window with sparse retention then keeps for the requests that come after.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from backend.blocks.group_tables import GroupTables
from backend.blocks.prefix_index import PrefixIndex


class CommonHit(NamedTuple):
    """A prompt's full-block keys; each group's hit table (cached blocks, NULL_BLOCK where
    a window needs none), all of the common hit's length; and the blocks of the longest
    hit one group alone holds when that is longer than the common one (else 0)."""

    keys: list[int]
    runs: list[list[int]]
    shared_blocks: int


def common_hit(
    groups: list[GroupTables], indexes: list[PrefixIndex], tokens: np.ndarray, salt: int
) -> CommonHit:
    """The longest prefix of ``tokens`` (never its last token's block) that every group
    of ``groups`` (each with its index of ``indexes``) serves. No mutation but the
    indexes' memos."""
    keys, first_run = indexes[0].lookup(tokens, salt)
    if not indexes[0].enabled:
        return CommonHit(keys, [[] for _ in groups], 0)
    limit = (tokens.shape[0] - 1) // indexes[0].block_size
    # groups that keep every block first: their hits bound the windows' search
    order = sorted(range(len(groups)), key=lambda n: groups[n].releases_behind)
    runs: list[list[int]] = [[] for _ in groups]
    longest, settled = 0, False
    while not settled:
        settled = True
        for number in order:
            known = first_run if number == 0 else None  # (group 0's, looked up above)
            run = groups[number].cached_run(keys, salt, tokens, limit, known)
            longest = max(longest, len(run))
            if len(run) < limit:
                limit, settled = len(run), False
            runs[number] = run
    shared = longest if longest > limit and len(groups) > 1 else 0
    return CommonHit(keys, [run[:limit] for run in runs], shared)
