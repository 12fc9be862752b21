"""The per-request table: requests.csv's columns, computed from the requests' outcomes."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from sim.engine.records import RequestOutcome

#: Columns of requests.csv, in file order.
REQUEST_COLUMNS = (
    "req_id",
    "arrival_s",
    "first_scheduled_s",
    "first_token_s",
    "finish_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "prompt_tokens",
    "output_tokens",
    "cached_prompt_tokens",
    "preemptions",
    "replica",
    "tenant",
    "priority",
    "n",
    "rejected_reason",
)


_REQUEST_FLOAT_COLUMNS = frozenset(
    {"arrival_s", "first_scheduled_s", "first_token_s", "finish_s", "ttft_s", "tpot_s", "e2e_s"}
)


def request_table(outcomes: Iterable[RequestOutcome]) -> dict[str, np.ndarray]:
    """Per-request columns (REQUEST_COLUMNS plus boolean `finished` / `rejected`), rows
    ordered by (arrival_s, req_id). Reads the outcomes; mutates nothing."""
    reqs = list(outcomes)
    order = np.lexsort((np.array([r.req_id for r in reqs]), np.array([r.arrival_s for r in reqs])))
    reqs = [reqs[int(i)] for i in order]

    def floats(attr: str) -> np.ndarray:
        return np.array([getattr(r, attr) for r in reqs], dtype=np.float64)

    def ints(values: Iterable[int]) -> np.ndarray:
        return np.fromiter(values, dtype=np.int64, count=len(reqs))

    arrival, first_token, finish = floats("arrival_s"), floats("first_token_s"), floats("finish_s")
    reason = np.array([r.rejected_reason for r in reqs], dtype=object)
    output_len, n = ints(r.output_len for r in reqs), ints(r.n for r in reqs)
    rejected = reason != ""
    finished = ~np.isnan(finish) & ~rejected
    generated = ints(r.output_tokens for r in reqs)
    multi_token = finished & (output_len >= 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(multi_token, (finish - first_token) / np.maximum(output_len - 1, 1), np.nan)
    return {
        "req_id": ints(r.req_id for r in reqs),
        "arrival_s": arrival,
        "first_scheduled_s": floats("first_scheduled_s"),
        "first_token_s": first_token,
        "finish_s": finish,
        "ttft_s": first_token - arrival,
        "tpot_s": tpot,
        "e2e_s": np.where(finished, finish - arrival, np.nan),
        "prompt_tokens": ints(r.prompt_len for r in reqs),
        "output_tokens": generated,
        "cached_prompt_tokens": ints(r.cached_prompt_tokens for r in reqs),
        "preemptions": ints(r.num_preemptions for r in reqs),
        "replica": ints(r.replica for r in reqs),
        "tenant": ints(r.tenant for r in reqs),
        "priority": ints(r.priority for r in reqs),
        "n": n,
        "rejected_reason": reason,
        "finished": finished,
        "rejected": rejected,
    }
