"""The engine in wall-clock time (sim.live.driver), with a stand-in executor that sleeps
instead of running torch: every sample's tokens come out once each, in order, before its
request's ``done``; a request that can never fit is done at once with its reason; the
engine's clock is the wall clock."""

from __future__ import annotations

import threading
import time

import numpy as np

from sim.config.loader import validate_scenario
from sim.live.driver import EngineDriver, token_ids
from sim.workload.request import Request

RAW = {
    "model": "tiny",
    "cache": {"block_size": 4, "num_blocks": 32},
    "scheduler": {"max_num_seqs": 4, "max_num_batched_tokens": 64},
}


class Sleeper:
    """A step takes 2 ms of wall time."""

    def execute(self, batch) -> float:
        time.sleep(0.002)
        return 0.002


def test_tokens_stream_once_each_and_the_clock_is_the_wall_clock():
    events: list[tuple] = []
    done = threading.Event()

    def publish(batch):
        events.extend(batch)
        if sum(e[0] == "done" for e in events) == 3:
            done.set()

    driver = EngineDriver(validate_scenario(RAW), lambda *_: Sleeper(), publish)
    driver.start()
    try:
        prompt = np.arange(10, dtype=np.int32)
        requests = [
            Request(driver.next_req_id(), driver.now(), prompt, output_len=6, n=2),
            Request(driver.next_req_id(), driver.now(), prompt, output_len=3),
            Request(driver.next_req_id(), driver.now(), np.ones(200, np.int32), output_len=4),
        ]
        for request in requests:
            driver.submit(request)
        assert done.wait(10)
    finally:
        driver.stop()
    assert driver.failure is None
    outcomes = {e[1].req_id: e[1] for e in events if e[0] == "done"}
    assert outcomes[2].rejected_reason.startswith("needs")  # 200 + 4 tokens > 32 blocks of 4
    for request in requests[:2]:
        for sample in range(request.n):
            mine = [e for e in events if e[0] == "tokens" and e[1:3] == (request.req_id, sample)]
            positions = [p for e in mine for p in range(e[3], e[3] + e[4])]
            assert positions == list(range(request.output_len))
        mine = [i for i, e in enumerate(events) if e[0] == "tokens" and e[1] == request.req_id]
        assert events.index(("done", outcomes[request.req_id])) > max(mine)
        outcome = outcomes[request.req_id]
        # the engine's times are wall seconds: 6 tokens at >= 2 ms a step take >= 12 ms
        assert outcome.finish_s - outcome.arrival_s >= 0.002 * request.output_len
        assert outcome.finish_s <= driver.now()
    ids = token_ids(0, 512, 0, 1, 2, 3)
    assert ids.tolist() == token_ids(0, 512, 0, 1, 0, 5)[2:].tolist()  # positions, not calls


class Broken:
    def execute(self, batch) -> float:
        raise RuntimeError("the device fell over")


def test_an_engine_that_fails_says_so_to_every_waiting_request():
    events: list[tuple] = []
    failed = threading.Event()

    def publish(batch):
        events.extend(batch)
        if any(e[0] == "failed" for e in batch):
            failed.set()

    driver = EngineDriver(validate_scenario(RAW), lambda *_: Broken(), publish)
    driver.start()
    try:
        driver.submit(Request(driver.next_req_id(), driver.now(), np.arange(8, dtype=np.int32), 3))
        assert failed.wait(10)
    finally:
        driver.stop()
    assert isinstance(driver.failure, RuntimeError)
    assert events[-1] == ("failed", "RuntimeError: the device fell over")
