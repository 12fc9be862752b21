"""The link between prefill and decode instances: KV transfers that share bandwidth.

Each instance reaches the link through ports of its own (one per GPU: each rank moves
its share of the KV over its own NVLink, NIC or PCIe lane), ``port_bytes_s`` in all. A
transfer from instance ``a`` to instance ``b`` flows, at any moment, at the smaller of
the two ports' fair shares: ``min(port_a / transfers at a, port_b / transfers at b)``,
so concurrent transfers into one decode instance (or out of one prefill instance)
divide its bandwidth, as a fluid model of processor sharing. Rates change only when a
transfer starts or ends; between those events every transfer's bytes fall linearly,
so one SimPy timer (the next completion) drives the whole link.

A transfer first waits the link's latency (a read's setup, not bandwidth), then joins.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import simpy


@dataclass(eq=False, slots=True)
class PeerTransfer:
    """One request's KV in flight from ``source`` to ``target`` (instance indices)."""

    key: int
    source: int
    target: int
    nbytes: float
    started_s: float
    done: Callable[[PeerTransfer], None]
    remaining: float = 0.0
    rate: float = 0.0
    finished_s: float = math.nan


class PeerLink:
    """Transfers between instances over their ports (``port_bytes_s[i]``: instance
    ``i``'s bandwidth onto the link, bytes/s), ``latency_s`` before each starts to flow.
    ``done(transfer)`` of a transfer is called at the simulated time it completes."""

    def __init__(self, env: simpy.Environment, port_bytes_s: list[float], latency_s: float):
        self.env = env
        self.port_bytes_s = list(port_bytes_s)
        self.latency_s = latency_s
        self._active: list[PeerTransfer] = []
        self._updated_s = 0.0
        self._timer: simpy.Process | None = None
        self.bytes_moved = 0.0
        self.busy_s = 0.0  # time with at least one transfer flowing

    def start(
        self,
        key: int,
        source: int,
        target: int,
        nbytes: float,
        done: Callable[[PeerTransfer], None],
    ) -> PeerTransfer:
        """Begin moving ``nbytes`` from instance ``source`` to ``target`` now."""
        transfer = PeerTransfer(key, source, target, float(nbytes), self.env.now, done)
        transfer.remaining = transfer.nbytes
        self.env.process(self._join_after_latency(transfer))
        return transfer

    def alone_s(self, source: int, target: int, nbytes: float) -> float:
        """How long ``nbytes`` from ``source`` to ``target`` take on an idle link."""
        rate = min(self.port_bytes_s[source], self.port_bytes_s[target])
        return self.latency_s + nbytes / rate

    def _join_after_latency(self, transfer: PeerTransfer):
        if self.latency_s > 0:
            yield self.env.timeout(self.latency_s)
        self._advance()
        if transfer.remaining <= 0:
            self._finish(transfer)
            return
        self._active.append(transfer)
        self._reschedule()

    def _advance(self) -> None:
        """Take each flowing transfer's bytes since the last change off its remainder."""
        now = self.env.now
        elapsed = now - self._updated_s
        if elapsed > 0 and self._active:
            self.busy_s += elapsed
            for transfer in self._active:
                moved = min(transfer.rate * elapsed, transfer.remaining)
                transfer.remaining -= moved
                self.bytes_moved += moved
        self._updated_s = now

    def _rates(self) -> None:
        counts: dict[int, int] = {}
        for transfer in self._active:
            counts[transfer.source] = counts.get(transfer.source, 0) + 1
            counts[transfer.target] = counts.get(transfer.target, 0) + 1
        ports = self.port_bytes_s
        for transfer in self._active:
            transfer.rate = min(
                ports[transfer.source] / counts[transfer.source],
                ports[transfer.target] / counts[transfer.target],
            )

    def _reschedule(self) -> None:
        """Rates changed: the next completion is the new timer's end."""
        self._rates()
        if self._timer is not None and self._timer.is_alive:
            self._timer.interrupt()
        if self._active:
            soonest = min(t.remaining / t.rate for t in self._active)
            self._timer = self.env.process(self._complete_after(soonest))

    def _complete_after(self, delay: float):
        try:
            yield self.env.timeout(delay)
        except simpy.Interrupt:
            return
        self._timer = None
        self._advance()
        # A transfer within a rounding error of its end is done now (float remainders).
        finished = [t for t in self._active if t.remaining <= t.nbytes * 1e-12 + 1e-9]
        if not finished:  # (rounding left the soonest a hair short: it ends now anyway)
            finished = [min(self._active, key=lambda t: t.remaining / t.rate)]
        for transfer in finished:
            self._active.remove(transfer)
        self._reschedule()
        for transfer in finished:
            self._finish(transfer)

    def _finish(self, transfer: PeerTransfer) -> None:
        self.bytes_moved += transfer.remaining
        transfer.remaining = 0.0
        transfer.finished_s = self.env.now
        transfer.done(transfer)
