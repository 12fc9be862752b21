"""A recorded run's prompts as chains of block ids, so a replay shares what the real
prompts shared: a system prompt, a few-shot preamble, a conversation's history.

Each prompt becomes one id per block of ``block`` tokens (its last block partial),
numbered in order of first sight; two prompts get equal ids exactly for the blocks over
which they agree from their start (a chained digest: a block's id stands for everything
before its end). The replay's trace carries these ids as ``hash_ids``
(sim.inputs.traces), never the recorded tokens or text.

* From token ids (:func:`token_blocks`): exact, block by block.
* From text (:func:`text_blocks`): the prompt's text, cut at the same character offsets
  for every prompt, a block every ``block`` x (characters per token) characters, the
  rate measured over the run's prompts (their total characters over their total prompt
  tokens). Two prompts share the blocks that end within their common text; how many
  tokens that is follows the run's average rate, not each prompt's own.

A prompt the engine counted longer than its ids or text (a BOS, a chat template)
continues its chain past them from their digest alone, so equal prompts stay equal.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from sim.recorded.run import RecordedRequests

#: The block of a chain when the run logged none: vLLM's default block size, a divisor
#: of every common one (so block-aligned prefix hits come out the same at 32 or 64).
DEFAULT_BLOCK_TOKENS = 16


class _Numbering:
    """Chained digests numbered in order of first sight."""

    def __init__(self) -> None:
        self.numbers: dict[bytes, int] = {}

    def chain(self, pieces: Sequence[bytes], blocks: int) -> np.ndarray:
        """Ids of ``blocks`` blocks whose contents are ``pieces`` (then nothing)."""
        digest, chain = b"", []
        for j in range(blocks):
            piece = pieces[j] if j < len(pieces) else b""
            # "+" ends every piece: past the pieces the chain goes on from the digest alone
            digest = hashlib.blake2b(digest + piece + b"+", digest_size=16).digest()
            chain.append(self.numbers.setdefault(digest, len(self.numbers)))
        return np.asarray(chain, dtype=np.int64)


def token_blocks(
    prompts: Sequence[np.ndarray], lengths: np.ndarray, block: int
) -> tuple[np.ndarray, ...]:
    """Each prompt's chain (module doc) from its token ids; ``lengths``: the engine's
    prompt lengths, which the chains cover (ceil(length / block) blocks at least)."""
    numbering = _Numbering()
    chains = []
    for ids, length in zip(prompts, lengths.tolist(), strict=True):
        ids = np.asarray(ids, dtype=np.int64)
        pieces = [ids[s : s + block].tobytes() for s in range(0, len(ids), block)]
        chains.append(numbering.chain(pieces, -(-max(len(ids), length) // block)))
    return tuple(chains)


def text_blocks(
    texts: Sequence[str | None], lengths: np.ndarray, block: int
) -> tuple[np.ndarray, ...] | None:
    """Each prompt's chain (module doc) from its text; None where no prompt has text. A
    prompt without text gets blocks of its own."""
    known = [(len(t), n) for t, n in zip(texts, lengths.tolist(), strict=True) if t]
    if not known or sum(n for _, n in known) == 0:
        return None
    per_token = sum(c for c, _ in known) / sum(n for _, n in known)
    stride = max(1, round(block * per_token))  # characters a block
    numbering = _Numbering()
    chains = []
    for i, (text, length) in enumerate(zip(texts, lengths.tolist(), strict=True)):
        data = (text or f"\0{i}").encode("utf-8", "surrogatepass")
        pieces = [data[s : s + stride] for s in range(0, len(data), stride)]
        chains.append(numbering.chain(pieces, max(1, -(-length // block))))
    return tuple(chains)


def shareable_note(requests: RecordedRequests, source: str) -> str:
    """A note: the share of prompt tokens in full blocks an earlier request sent (what an
    unbounded prefix cache would hit), in send order; ``requests`` carries its chains."""
    block, chains = requests.prefix_block_tokens, requests.prefix_blocks or ()
    seen: set[int] = set()
    shared = 0
    for i in np.argsort(requests.send_s, kind="stable").tolist():
        full = min(len(chains[i]), int(requests.prompt_tokens[i]) // block)
        hits = 0
        while hits < full and int(chains[i][hits]) in seen:
            hits += 1
        shared += hits * block
        seen.update(int(j) for j in chains[i][:full])
    total = int(requests.prompt_tokens.sum())
    return (
        f"{source}: prompts share prefixes block by block ({block}-token blocks); "
        f"{100 * shared / max(total, 1):.1f} % of prompt tokens lie in blocks an earlier "
        "request sent (an unbounded prefix cache's hit rate)"
    )


def payload_text(payload: Any) -> str | None:
    """A request body's prompt: its ``prompt``, or its ``messages`` in order as JSON (a
    shared system message is then a shared start); None for neither."""
    if not isinstance(payload, dict):
        return None
    text = payload.get("prompt", payload.get("messages"))
    if text is None:
        return None
    return text if isinstance(text, str) else json.dumps(text)


__all__ = ["DEFAULT_BLOCK_TOKENS", "payload_text", "shareable_note", "text_blocks", "token_blocks"]
