"""Building a disaggregated run (``routing.disaggregation``): each pool's instances from
its own scenario, the peer link between them priced from the link catalogue, the
routers and the decider (sim/engine/disaggregation.py carries the requests through)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import simpy

from backend.connectors.peer import PeerConnector
from policies.routing import ROUTERS
from sim.catalog.links import peer_link
from sim.engine.disaggregation import Decider, DisaggregatedCluster
from sim.engine.peer_link import PeerLink
from sim.engine.records import RequestOutcome
from sim.engine.replica import Replica
from sim.output.summary import distribution
from sim.run.build import make_policy, policy_context


def build_pools(
    scenario,
    env: simpy.Environment,
    on_done: Callable[[RequestOutcome], None],
    make_replica: Callable[..., Replica],
    requests: Sequence = (),
) -> DisaggregatedCluster:
    """The prefill and decode pools of ``scenario`` on ``env``, instances numbered
    prefill first; ``make_replica(pool_scenario, index, on_done)`` builds one instance
    (sim.run.build.build_replica with the run's sinks)."""
    split = scenario.routing.disaggregation
    prefill_scenario, decode_scenario = scenario.pools
    holder: list[DisaggregatedCluster] = []
    num_prefill = split.prefill.replicas
    prefill = [
        make_replica(prefill_scenario, i, lambda o: holder[0].prefilled(o))
        for i in range(num_prefill)
    ]
    decode = [
        make_replica(decode_scenario, num_prefill + i, lambda o: holder[0].decoded(o))
        for i in range(split.decode.replicas)
    ]
    for replica in prefill + decode:
        replica.state.peer = PeerConnector(replica.alloc.block_size)
    routers = (
        _router(prefill_scenario, requests),
        _router(decode_scenario, requests),
    )
    cluster = DisaggregatedCluster(
        env,
        prefill,
        decode,
        routers,
        Decider(split.decider, split.threshold),
        _link(env, split.link, prefill_scenario, decode_scenario, num_prefill, len(decode)),
        decode_scenario.cache.replica_block_bytes(
            decode_scenario.model, decode_scenario.tensor_parallel
        ),
        on_done,
    )
    holder.append(cluster)
    return cluster


def _router(pool_scenario, requests):
    routing = pool_scenario.routing
    context = policy_context(pool_scenario, requests)
    return make_policy(pool_scenario, ROUTERS, routing.router, routing.params, context)


def _link(env, kind: str, prefill, decode, num_prefill: int, num_decode: int) -> PeerLink:
    """The peer link: each instance's port is its GPUs' links together."""
    ports = []
    latency = 0.0
    for pool, count in ((prefill, num_prefill), (decode, num_decode)):
        hw = pool.hardware
        per_gpu, latency_s = peer_link(kind, hw.interconnect_bytes_s, hw.host_link_bytes_s)
        ports += [per_gpu * pool.tensor_parallel] * count
        latency = max(latency, latency_s)
    return PeerLink(env, ports, latency)


def pool_figures(cluster: DisaggregatedCluster) -> dict:
    """The summary's ``disaggregation`` section: the pools, what crossed the link and
    how long, and where the time to the first token went for requests handed off."""
    offs = [h for h in cluster.hand_offs.values() if not math.isnan(h.transfer_end_s)]
    link = cluster.link
    elapsed = max((h.transfer_end_s for h in offs), default=0.0)  # (the run's clock ran on)

    def spans(start: str, end: str) -> np.ndarray:
        return np.array([getattr(h, end) - getattr(h, start) for h in offs], dtype=np.float64)

    transfer = spans("transfer_start_s", "transfer_end_s")
    alone = np.array([h.transfer_alone_s for h in offs], dtype=np.float64)
    return {
        "prefill_instances": len(cluster.prefill),
        "decode_instances": len(cluster.decode),
        "hand_offs": len(offs),
        "bytes_moved": float(link.bytes_moved),
        # Of the time until the last read ended, the share with a read flowing.
        "link_busy_fraction": link.busy_s / elapsed if elapsed > 0 else None,
        "prefill_queue_s": distribution(spans("arrival_s", "prefill_started_s")),
        "prefill_s": distribution(spans("prefill_started_s", "prefill_done_s")),
        "transfer_wait_s": distribution(spans("prefill_done_s", "transfer_start_s")),
        "transfer_s": distribution(transfer),
        # How much slower than alone on the link each read ran (1: no contention).
        "transfer_slowdown": distribution(transfer / alone),
    }


#: hand_offs.csv's columns: the request, its instances, when each phase began and ended
#: (simulated seconds, NaN where not reached), the bytes read, the read on an idle link,
#: and the TTFT's parts before the decode instance's first step.
HAND_OFF_COLUMNS = (
    "req_id",
    "prefill_instance",
    "decode_instance",
    "arrival_s",
    "prefill_start_s",
    "prefill_end_s",
    "transfer_start_s",
    "transfer_end_s",
    "transfer_alone_s",
    "bytes",
    "queue_s",
    "prefill_s",
    "transfer_wait_s",
    "transfer_s",
)


def hand_off_table(cluster: DisaggregatedCluster) -> dict[str, np.ndarray]:
    """hand_offs.csv's columns (:data:`HAND_OFF_COLUMNS`), one row per request sent
    through the prefill pool, by request id."""
    offs = sorted(cluster.hand_offs.values(), key=lambda h: h.req_id)

    def times(name: str) -> np.ndarray:
        return np.array([getattr(h, name) for h in offs], dtype=np.float64)

    arrival, start, end = times("arrival_s"), times("prefill_started_s"), times("prefill_done_s")
    read_start, read_end = times("transfer_start_s"), times("transfer_end_s")
    ints = {
        "req_id": [h.req_id for h in offs],
        "prefill_instance": [h.prefill for h in offs],
        "decode_instance": [h.decode for h in offs],
    }
    table = {name: np.array(values, dtype=np.int64) for name, values in ints.items()}
    table |= {
        "arrival_s": arrival,
        "prefill_start_s": start,
        "prefill_end_s": end,
        "transfer_start_s": read_start,
        "transfer_end_s": read_end,
        "transfer_alone_s": times("transfer_alone_s"),
        "bytes": np.array([h.nbytes for h in offs], dtype=np.int64),
        "queue_s": start - arrival,
        "prefill_s": end - start,
        "transfer_wait_s": read_start - end,
        "transfer_s": read_end - read_start,
    }
    return table
