"""The worker side of vLLM's NIXL connector, stood in for when recording a P/D stream:
the scheduler and its scheduler-side connector are vLLM's own; the reads between
instances are timed here and reported to the scheduler in each step's
``kv_connector_output``, as the worker reports them.

* Decode role (``kv_consumer``): a request the scheduler parks in
  ``WAITING_FOR_REMOTE_KVS`` starts its read at the start of the step that parked it;
  the read takes ``latency_s + block_s * blocks`` (its blocks: those allocated for it
  that hold no cached prefix) and is reported ``finished_recving`` by the first step to
  end at or after that time (an idle engine steps at once).
* Prefill role (``kv_producer``): a request that finished holds its blocks; the decode
  side reads them (``latency_s + block_s * blocks`` after it finished, its blocks the
  whole prompt's), or, for a request the stream marks ``abandoned``, never does and the
  lease (``kv_lease_s``) runs out; either way it is reported ``finished_sending``.

Stdlib only besides vLLM (it runs in vLLM's venv), used by record.py.
"""

from __future__ import annotations

import math


def pd_transfer_params(role: str | None, request_id: str) -> dict | None:
    """``SamplingParams.extra_args`` of a request sent to a ``role`` instance, as vLLM's
    P/D proxy fills ``kv_transfer_params`` (None: not a P/D stream)."""
    if role == "kv_consumer":
        params = {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_block_ids": [[1]],  # (the stand-in reads no real memory)
            "remote_engine_id": "prefill-0",
            "remote_request_id": request_id,
            "remote_host": "localhost",
            "remote_port": 5600,
            "tp_size": 1,
        }
    elif role == "kv_producer":
        params = {"do_remote_decode": True, "do_remote_prefill": False}
    else:
        return None
    return {"kv_transfer_params": params}


class PDWorker:
    """Times the reads of one P/D instance and reports them (see the module)."""

    def __init__(self, role: str, cfg: dict, times: dict, requests_by_id: dict, abandoned):
        self.role = role
        self.read = cfg["kv_read"]
        self.lease_s = cfg["kv_lease_s"]
        self.block_size = cfg["block_size"]
        self.times = times
        self.requests_by_id = requests_by_id
        self.abandoned = set(abandoned)
        self.due: dict[str, float] = {}  # request -> when its read ends

    def read_s(self, blocks: int) -> float:
        return self.read["latency_s"] + self.read["block_s"] * blocks

    def after_schedule(self, sched, t_start: float) -> None:
        """Decode role: reads start for the requests the scheduler just parked."""
        if self.role != "kv_consumer":
            return
        from vllm.v1.request import RequestStatus

        for rid, req in sched.requests.items():
            tm = self.times.get(rid)
            if req.status != RequestStatus.WAITING_FOR_REMOTE_KVS or "kv_load_start_s" in tm:
                continue
            group = sched.kv_cache_manager.get_blocks(rid).blocks[0]
            blocks = sum(1 for block in group if block.block_hash is None)
            tm["kv_load_start_s"] = t_start
            tm["kv_load_blocks"] = blocks
            self.due[rid] = t_start + self.read_s(blocks)

    def after_output(self, finished: list[str], t_end: float) -> None:
        """Prefill role: the requests that just finished are read (or abandoned)."""
        if self.role != "kv_producer":
            return
        for rid in finished:
            if rid in self.abandoned:
                done = t_end + self.lease_s
            else:
                prompt = len(self.requests_by_id[rid].prompt_token_ids)
                done = t_end + self.read_s(math.ceil(prompt / self.block_size))
            self.times[rid]["kv_sent_s"] = done
            self.due[rid] = done

    def output(self, now: float):
        """The ``KVConnectorOutput`` of a step that ends at ``now`` (None: nothing)."""
        ended = sorted(rid for rid, at in self.due.items() if at <= now)
        if not ended:
            return None
        from vllm.v1.outputs import KVConnectorOutput

        for rid in ended:
            del self.due[rid]
        if self.role == "kv_consumer":
            return KVConnectorOutput(finished_recving=set(ended))
        return KVConnectorOutput(finished_sending=set(ended))

    def next_event(self) -> float | None:
        return min(self.due.values()) if self.due else None
