"""Prefill and decode on different instances: the prefill pool computes a prompt, the
decode instance reads its KV over the peer link and generates the output.

A request's path, as llm-d and vLLM's P/D proxy send it:

1. the decode pool's router picks a decode instance (a request that can never fit it is
   rejected there, with its reason, before any prefill);
2. the decider says whether the prompt goes through the prefill pool: ``always``, or
   (``prefix-aware``) only when what the decode instance does not hold of it is longer
   than a threshold; otherwise the decode instance serves it whole;
3. the prefill pool's router picks a prefill instance, which computes the prompt as a
   one-token request and keeps its blocks held once it finishes;
4. the request then queues on the decode instance. Admitted, it allocates the whole
   prompt and waits while its KV after the local prefix hit is read from the prefill
   instance (vLLM's NIXL pull); the read shares the link with every other transfer;
5. when the read ends the prefill instance frees the blocks, and the decode instance
   computes the prompt's last token, samples the first output token and decodes on.

What the client sees is one request: its outcome is the decode instance's, with the
queue measured from its arrival to the first prefill step. Each hand-off's times go in
:class:`HandOff` (queue, prefill, transfer wait, transfer).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import simpy

from backend.connectors.peer import PeerLoad
from policies.routing import Router
from sim.engine.cluster import Arrivals, checked_route
from sim.engine.peer_link import PeerLink, PeerTransfer
from sim.engine.records import RequestOutcome
from sim.engine.replica import Replica
from sim.workload.request import Request

#: The scenario fields of the two pools' routers (a router's failure names its field).
_ROLES = ("routing.disaggregation.prefill.router", "routing.disaggregation.decode.router")


@dataclass(eq=False, slots=True)
class HandOff:
    """One request's way through both pools (simulated seconds; NaN: not reached)."""

    req_id: int
    arrival_s: float
    prefill: int  # instance indices
    decode: int
    prefill_started_s: float = math.nan
    prefill_done_s: float = math.nan
    transfer_start_s: float = math.nan
    transfer_end_s: float = math.nan
    transfer_alone_s: float = math.nan  # what the read takes on an idle link
    nbytes: float = 0.0


class Decider:
    """Which requests go through the prefill pool (llm-d's P/D deciders)."""

    def __init__(self, rule: str, threshold: int):
        self.rule, self.threshold = rule, threshold

    def through_prefill(self, request: Request, decode: Replica) -> bool:
        """Whether ``request``'s prompt is computed by the prefill pool, ``decode`` being
        the decode instance chosen for it (its prefix cache, as its view shows it)."""
        if self.rule == "always":
            return True
        return request.prompt_len - decode.view.cached_prefix_tokens(request) > self.threshold


class DisaggregatedCluster(Arrivals):
    """A prefill pool and a decode pool joined by a peer link, fed by one arrival
    process. Instances are numbered prefill first (the link's ports, steps.csv's
    ``replica``); ``on_done`` gets each request's one outcome."""

    def __init__(
        self,
        env: simpy.Environment,
        prefill: Sequence[Replica],
        decode: Sequence[Replica],
        routers: tuple[Router, Router],
        decider: Decider,
        link: PeerLink,
        block_bytes: float,
        on_done: Callable[[RequestOutcome], None],
    ):
        super().__init__(env, [*prefill, *decode])
        self.prefill, self.decode = list(prefill), list(decode)
        self.routers = routers
        self.decider = decider
        self.link = link
        self.block_bytes = block_bytes
        self._on_done = on_done
        self._views = (
            tuple(r.view for r in self.prefill),
            tuple(r.view for r in self.decode),
        )
        self.hand_offs: dict[int, HandOff] = {}
        self._originals: dict[int, Request] = {}  # requests in the prefill pool
        for replica in self.decode:
            replica.state.on_peer_load = self._transfer_starter(replica)

    def dispatch(self, request: Request) -> None:
        """Route ``request`` to its decode instance, through the prefill pool or not."""
        now = self.env.now
        decode = self.decode[
            checked_route(self.routers[1], request, self._views[1], now, _ROLES[1])
        ]
        if decode.never_fits(request) or not self.decider.through_prefill(request, decode):
            decode.submit(request)  # (it rejects one that can never fit, with the reason)
            return
        prefill = self.prefill[
            checked_route(self.routers[0], request, self._views[0], now, _ROLES[0])
        ]
        self.hand_offs[request.req_id] = HandOff(
            request.req_id, request.arrival_s, prefill.index, decode.index
        )
        self._originals[request.req_id] = request
        prefill.submit_to_hand_off(dataclasses.replace(request, output_len=1, n=1))

    # -- outcomes -------------------------------------------------------------------------
    def prefilled(self, outcome: RequestOutcome) -> None:
        """A prefill instance's outcome of a prompt: hand it to its decode instance, or
        reject the request with the prefill pool's reason."""
        request = self._originals.pop(outcome.req_id)
        hand_off = self.hand_offs[outcome.req_id]
        if not outcome.finished:
            self.hand_offs.pop(outcome.req_id)
            reason = f"prefill pool: {outcome.rejected_reason}"
            self._on_done(outcome._replace(request=request, rejected_reason=reason))
            return
        hand_off.prefill_started_s = outcome.first_scheduled_s
        hand_off.prefill_done_s = outcome.finish_s
        self.replicas[hand_off.decode].submit_handed_off(request, hand_off.prefill)

    def decoded(self, outcome: RequestOutcome) -> None:
        """A decode instance's outcome: the request's, its queue counted from the first
        prefill step. One rejected before its KV was read frees the prefill's blocks."""
        hand_off = self.hand_offs.get(outcome.req_id)
        if hand_off is None:
            self._on_done(outcome)
            return
        decode = self.replicas[hand_off.decode]
        source = decode.state.peer.forget(outcome.req_id)
        if source is not None:
            self.replicas[source].release_held(outcome.req_id)
        if not math.isnan(hand_off.prefill_started_s):
            outcome = outcome._replace(first_scheduled_s=hand_off.prefill_started_s)
        self._on_done(outcome)

    def in_flight_outcomes(self, reason: str) -> list[RequestOutcome]:
        """Outcomes of the requests in flight in either pool (the prefill pool's as the
        requests the clients sent)."""
        outcomes = [o for replica in self.decode for o in replica.unfinished_outcomes(reason)]
        for replica in self.prefill:
            for outcome in replica.unfinished_outcomes(reason):
                outcomes.append(outcome._replace(request=self._originals[outcome.req_id]))
        return outcomes

    # -- the transfer ---------------------------------------------------------------------
    def _transfer_starter(self, decode: Replica) -> Callable[[PeerLoad], None]:
        def start(load: PeerLoad) -> None:
            hand_off = self.hand_offs[load.req_id]
            hand_off.nbytes = load.blocks * self.block_bytes
            hand_off.transfer_start_s = self.env.now
            hand_off.transfer_alone_s = self.link.alone_s(
                load.source, decode.index, hand_off.nbytes
            )
            self.link.start(load.req_id, load.source, decode.index, hand_off.nbytes, self._read)

        return start

    def _read(self, transfer: PeerTransfer) -> None:
        """A read ended: the decode instance has the KV, the prefill instance frees it."""
        hand_off = self.hand_offs[transfer.key]
        hand_off.transfer_end_s = self.env.now
        self.replicas[transfer.target].kv_arrived(transfer.key)
        self.replicas[transfer.source].release_held(transfer.key)
