"""The peer connector: one instance's side of prefill/decode hand-offs, as vLLM's NIXL
connector keeps it on the scheduler's side (``nixl/pull_scheduler.py``).

On a prefill instance a request sent to be decoded elsewhere finishes after its prompt,
and its blocks stay held for the reader (``request_finished`` says to delay the free)
until the decode side has read them. On a decode instance such a request's prompt KV is
remote: every prompt token after the local prefix hit is loaded asynchronously
(``get_num_new_matched_tokens`` returns them with ``load_async``), into blocks allocated
for the whole prompt that publish nothing until the load is done; the request waits
meanwhile (vLLM's ``WAITING_FOR_REMOTE_KVS``), and once the KV is in, its last prompt
token is computed locally so that the next one can be sampled.

This object is bookkeeping only, no clock: the engine moves the bytes over the peer
link (``sim/engine/peer_link.py``) and says when a load is done.
"""

from __future__ import annotations

from typing import NamedTuple

from backend.transfer import GPU, PEER, Transfer


class PeerLoad(NamedTuple):
    """One request's prompt KV read from ``source`` (an instance index): the blocks of
    each KV cache group's table there, from ``first_block`` on, into this instance's."""

    req_id: int
    source: int
    first_block: int
    blocks: int


def read_moves(load: PeerLoad, source_table, target_table) -> list[Transfer]:
    """The moves of ``load``'s read: each of its blocks from the prefill instance's table
    ``source_table`` (its device pool, PEER) into the same position of this instance's
    ``target_table`` (GPU), one KV cache group's tables."""
    positions = range(load.first_block, load.first_block + load.blocks)
    return [Transfer(int(source_table[i]), int(target_table[i]), PEER, GPU) for i in positions]


class PeerConnector:
    """Hand-offs in and out of one instance. Mutated by the engine only."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self._incoming: dict[int, int] = {}  # decode role: request -> prefill instance
        self._sending: set[int] = set()  # prefill role: requests whose KV is read later

    # -- prefill role -------------------------------------------------------------------
    def send_later(self, req_id: int) -> None:
        """``req_id`` is prefilled here for a decode instance to read."""
        self._sending.add(req_id)

    def abandon(self, req_id: int) -> None:
        """``req_id`` was aborted before it finished here: nothing will be read."""
        self._sending.discard(req_id)

    def request_finished(self, req_id: int) -> bool:
        """``req_id`` finished here: whether its blocks stay held for the reader (vLLM:
        ``request_finished``'s delay_free_blocks)."""
        if req_id in self._sending:
            self._sending.discard(req_id)
            return True
        return False

    # -- decode role --------------------------------------------------------------------
    def expect(self, req_id: int, source: int) -> None:
        """``req_id``'s prompt KV is on instance ``source``."""
        self._incoming[req_id] = source

    def expects(self, req_id: int) -> bool:
        return req_id in self._incoming

    def remote_tokens(self, req_id: int, prompt_len: int, local_tokens: int) -> int:
        """Prompt tokens after the ``local_tokens`` hit to load asynchronously (0: none,
        the request is not a hand-off): all the rest of the prompt."""
        if req_id not in self._incoming:
            return 0
        return max(prompt_len - local_tokens, 0)

    def start_load(self, req_id: int, local_tokens: int, prompt_len: int) -> PeerLoad:
        """``req_id``'s whole prompt (``prompt_len`` tokens) was allocated, the first
        ``local_tokens`` (whole blocks) hit here: the load to run, of every block after
        them, the partial last one too. Only one load per request (vLLM: one transfer
        per request)."""
        source = self._incoming.pop(req_id)
        first = local_tokens // self.block_size
        return PeerLoad(req_id, source, first, -(-prompt_len // self.block_size) - first)

    def forget(self, req_id: int) -> int | None:
        """``req_id`` leaves before its KV was read (rejected or aborted): the prefill
        instance still holding its blocks, if any."""
        return self._incoming.pop(req_id, None)
