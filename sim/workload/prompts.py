"""Prompt token ids built when asked, from what defines them, so that none is kept.

A generated :class:`~sim.workload.request.Request` holds its prompt's length and the
run's :class:`PromptBook`; ``request.prompt`` asks the book, which builds the array
afresh every time (the engine keeps it while the request is in flight, nothing keeps
it after). What the book holds is per-request int32 columns (own length, previous
turn, prefix group, trace row), each prefix group's system prompt once, and the
trace's hash ids: a few bytes a request instead of four a token.

A prompt is, token for token:

* plain: the request's own tokens (:class:`~sim.workload.tokens.PromptStreams`);
* in a prefix group: the group's system prompt, then its own tokens;
* a session turn: the previous turn's prompt, then the previous turn's output (sample 0's
  stream, exactly what the engine generates for it), then its own tokens;
* a Mooncake trace row: the 512-token blocks of its hash ids cut to the prompt length,
  then own tokens for what the blocks do not cover.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sim.workload.tokens import (
    MOONCAKE_BLOCK_TOKENS,
    PromptStreams,
    hash_block_tokens,
    output_stream_states,
    stream_heads,
    stream_id,
)


def _column(values: np.ndarray | None) -> np.ndarray | None:
    return None if values is None else np.asarray(values, dtype=np.int32)


class PromptBook:
    """Every generated request's prompt, built on demand (see the module docstring).

    ``own_len[i]``: request i's own tokens (past its group's prompt, its history or its
    hash-id blocks). ``previous[i]``: its session's previous turn, -1 for none (None: no
    sessions). ``group[i]``: its prefix group, -1 for none, whose system prompt (built
    once, here) is ``group_len[group[i]]`` tokens long (None: no groups).
    ``hash_ids[i]`` with ``hashed_len[i]``: a trace row's hash ids and how many of the
    prompt's tokens their blocks of ``hash_block`` tokens give (None: no trace).
    ``own_key[i]``: the prompt-pool entry whose own tokens request i sends (None: each
    request its own). Immutable after construction; :meth:`prompt` mutates nothing."""

    def __init__(
        self,
        seed: int,
        vocab_size: int,
        own_len: np.ndarray,
        *,
        output_len: np.ndarray | None = None,
        previous: np.ndarray | None = None,
        group: np.ndarray | None = None,
        group_len: Sequence[int] = (),
        hash_ids: Sequence[np.ndarray] | None = None,
        hashed_len: np.ndarray | None = None,
        hash_block: int = MOONCAKE_BLOCK_TOKENS,
        own_key: np.ndarray | None = None,
    ):
        self.seed = seed
        self.vocab_size = vocab_size
        self._streams = PromptStreams(seed, vocab_size)
        self._own_len = _column(own_len)
        self._output_len = _column(output_len)
        self._previous = _column(previous)
        self._group = _column(group)
        self._group_tokens = tuple(self._streams.group(g, n) for g, n in enumerate(group_len))
        for tokens in self._group_tokens:
            tokens.flags.writeable = False  # shared by every prompt of the group
        self._hash_ids = hash_ids
        self._hashed_len = _column(hashed_len)
        self._hash_block = hash_block
        self._own_key = _column(own_key)

    def prompt(self, req_id: int) -> np.ndarray:
        """Request ``req_id``'s prompt token ids (a new int32 array on every call; the
        same values on every call and in every process)."""
        if self._hash_ids is not None:
            return self._hashed(req_id)
        if self._previous is not None and self._previous[req_id] >= 0:
            return self._turn(req_id)
        key = req_id if self._own_key is None else int(self._own_key[req_id])
        own = self._streams.own(key, int(self._own_len[req_id]))
        head = self._head(req_id)
        return own if head is None else np.concatenate([head, own])

    def group_prompt(self, group: int) -> np.ndarray:
        """Prefix group ``group``'s system prompt (read-only, the one shared array)."""
        return self._group_tokens[group]

    def _head(self, req_id: int) -> np.ndarray | None:
        """The system prompt of ``req_id``'s prefix group, None for none."""
        if self._group is None or self._group[req_id] < 0:
            return None
        return self._group_tokens[self._group[req_id]]

    def _turn(self, req_id: int) -> np.ndarray:
        """A session turn: its session's first turn's prompt, then every turn's output and
        the next turn's own tokens up to this one (two vectorised hash calls)."""
        chain = [req_id]
        while (before := int(self._previous[chain[-1]])) >= 0:
            chain.append(before)
        turns = np.asarray(chain[::-1], dtype=np.int64)
        own_len, out_len = self._own_len[turns], self._output_len[turns[:-1]]
        owns = np.split(self._streams.own_many(turns, own_len), np.cumsum(own_len)[:-1])
        states = output_stream_states(self.seed, stream_id(turns[:-1], 0))
        outs = stream_heads(states, out_len, self.vocab_size)  # int32 already
        outs = np.split(outs, np.cumsum(out_len)[:-1])
        head = self._head(int(turns[0]))
        pieces = [] if head is None else [head]
        for own, out in zip(owns, outs):
            pieces += [own, out]
        pieces.append(owns[-1])
        return np.concatenate(pieces)

    def _hashed(self, req_id: int) -> np.ndarray:
        hashed = int(self._hashed_len[req_id])
        ids = self._hash_ids[req_id][: -(-hashed // self._hash_block)]
        blocks = hash_block_tokens(self.seed, ids, self.vocab_size, self._hash_block)[:hashed]
        own = self._streams.own(req_id, int(self._own_len[req_id]))
        return np.concatenate([blocks, own])
