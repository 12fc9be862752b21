"""Step-for-step parity with a real engine's scheduler: recorded decisions of vLLM's own
V1 scheduler (``tests/parity/vllm-<version>/*.json``, written by bench/parity/record.py)
replayed through pagesim's ``vllm-v1`` engine profile.

A record holds one seeded stream (requests with their arrival, prompt and output
length), the scheduler's settings, a step-time function both sides share
(``step + tokens * T + seqs * S``: T tokens and S requests scheduled) and, for every
step, what the real scheduler decided: tokens scheduled per request, requests
preempted, requests newly scheduled and the prefix-cache hit each started from, free
blocks after scheduling, requests finished. :func:`replay` builds the same stream as a
scenario with ``scheduler.engine: vllm-v1``, serves it on one replica whose executor
records the same facts and prices each step with the same function, and
:func:`compare` finds the first step where the two differ.

Prompts are stored as segments ``[key, length]`` expanding to
``1 + ((key * 1_000_003 + i) * 2_654_435_761) % 32_000``; the k-th sampled token of
the j-th request is ``32_001 + (j * 7_777_777 + k * 97) % 30_000``, as the recorder
feeds them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import simpy

from backend.connectors.peer import PeerConnector, PeerLoad
from sim.config import Scenario
from sim.engine import Replica
from sim.engine.cluster import arrival_delay
from sim.inputs.textfile import parse_json, read_text
from sim.run.build import build_cluster, build_replica
from sim.workload.request import Request

FORMAT = "pagesim-parity"
TIME_TOLERANCE_S = 1e-9  # the same float expression on both sides; allow a last-bit slip


def segment_tokens(segments: list[list[int]]) -> np.ndarray:
    """A prompt's token ids; a negative key quotes the first ``length`` output tokens of
    request ``-key - 1`` (a chat's earlier answer), as the recorder fed them."""
    parts = []
    for key, length in segments:
        positions = np.arange(length, dtype=np.int64)
        if key < 0:
            parts.append(32_001 + ((-key - 1) * 7_777_777 + positions * 97) % 30_000)
        else:
            parts.append(1 + ((key * 1_000_003 + positions) * 2_654_435_761) % 32_000)
    return np.concatenate(parts).astype(np.int32)


class RecordedOutputs:
    """The sampled tokens the recorder fed vLLM (a TokenSource)."""

    def __init__(self, index_of: dict[int, int], fanned: set[int]):
        self.index_of = index_of  # pagesim req_id -> the request's position in the stream
        self.fanned = fanned  # requests with n > 1 (children j * 16 + k)

    def stream_state(self, req_id: int, sample: int) -> int:
        j = self.index_of[req_id]
        return j * 16 + sample if req_id in self.fanned else j

    def tokens(self, states: np.ndarray, positions: np.ndarray) -> np.ndarray:
        return (32_001 + (states * 7_777_777 + positions * 97) % 30_000).astype(np.int32)

    def decode_inputs(self, states: np.ndarray, generated: np.ndarray) -> np.ndarray:
        return self.tokens(states, generated - 1)

    def prompt(self, request: Request) -> np.ndarray:
        return request.prompt


@dataclass
class Replayed:
    steps: list[dict[str, Any]] = field(default_factory=list)
    request_times: dict[str, dict[str, float]] = field(default_factory=dict)


class RecordingExecutor:
    """Prices each step with the record's function and notes what the step holds."""

    def __init__(self, coefficients: dict[str, float], names: dict[int, str]):
        self.c = coefficients
        self.names = names  # pagesim req_id -> the record's request id
        self.replica: Replica | None = None
        self.steps: list[dict[str, Any]] = []
        self._seen: set[int] = set()  # sequence ids scheduled before
        self._preemptions: dict[int, int] = {}
        self._live: dict[int, tuple[str, int, bool]] = {}  # (name, request, last step)

    def execute(self, batch) -> float:
        state = self.replica.state
        name_of = {s.seq_id: self.name(s.request, s.sample) for s in state.prefilling}
        d = state.decodes
        requests = {r.req_id: r for r in state.running_requests()}
        for seq_id, req_id, sample in zip(d.seq_id.tolist(), d.req_id.tolist(), d.sample.tolist()):
            name_of[seq_id] = self.name(requests[req_id], sample)
        scheduled: dict[str, int] = {}
        new, hits = [], {}
        for chunk in batch.prefills:
            name = name_of[chunk.seq_id]
            scheduled[name] = chunk.num_tokens
            if chunk.seq_id not in self._seen:
                new.append(name)
                hits[name] = chunk.start
        for seq_id in batch.decode_seq_ids.tolist():
            scheduled[name_of[seq_id]] = 1
        self._seen.update(name_of)
        tokens, seqs = sum(scheduled.values()), len(scheduled)
        seconds = self.c["step"] + self.c["tokens"] * tokens + self.c["seqs"] * seqs
        now = self.replica.env.now
        self.steps.append(
            {
                "t_start": now,
                "t_end": now + seconds,
                "scheduled": scheduled,
                "preempted": self._new_preemptions(state, name_of),
                "new": new,
                "prefix_hits": hits,
                "free_blocks": state.alloc.available_blocks(),
                "finished": [],
            }
        )
        self._remember_live(state, name_of, batch)
        return seconds

    def name(self, request: Request, sample: int) -> str:
        """The record's id of one sample (vLLM names a child ``parent#k``)."""
        name = self.names[request.req_id]
        return f"{name}#{sample}" if request.n > 1 else name

    def _new_preemptions(self, state, name_of: dict[int, str]) -> list[str]:
        """Who was preempted since the last step: requests whose count grew; of a
        fanned-out one, the samples that left the device without finishing."""
        preempted = []
        for req_id, progress in state.in_flight.items():
            count = len(progress.preemption_times)
            if count == self._preemptions.get(req_id, 0):
                continue
            self._preemptions[req_id] = count
            if progress.request.n == 1:
                preempted.append(self.names[req_id])
                continue
            live = set(name_of.values())
            preempted += [
                name
                for seq_id, (name, owner, last) in self._live.items()
                if owner == req_id and not last and name not in live
            ]
        return preempted

    def _remember_live(self, state, name_of: dict[int, str], batch) -> None:
        """The sequences on the device as this step runs, and whether it is their last."""
        last = set()
        d = state.decodes
        scheduled = set(batch.decode_seq_ids.tolist())
        for seq_id, generated, target in zip(
            d.seq_id.tolist(), d.generated.tolist(), d.target.tolist()
        ):
            if seq_id in scheduled and generated + 1 >= target:
                last.add(seq_id)
        for chunk in batch.prefills:
            seq = next(s for s in state.prefilling if s.seq_id == chunk.seq_id)
            done = chunk.start + chunk.num_tokens == seq.tokens.shape[0]
            if done and seq.generated + 1 >= seq.request.output_len:
                last.add(seq.seq_id)
        owners = {s.seq_id: s.request.req_id for s in state.prefilling}
        owners.update(zip(d.seq_id.tolist(), d.req_id.tolist()))
        self._live = {
            seq_id: (name, owners[seq_id], seq_id in last) for seq_id, name in name_of.items()
        }
        self.steps[-1]["finished"] = [name_of[seq_id] for seq_id in sorted(last)]


def read_record(path: Path) -> dict[str, Any]:
    record = parse_json(read_text(path, ValueError))
    if record.get("format") != FORMAT:
        raise ValueError(f"{path}: format: expected {FORMAT!r}, got {record.get('format')!r}")
    return record


def scenario_of(record: dict[str, Any]) -> Scenario:
    """The record's scheduler settings as a pagesim scenario under ``vllm-v1``."""
    cfg = record["config"]
    scheduler = {
        "engine": "vllm-v1",
        "policy": cfg.get("policy", "fcfs"),
        "max_num_seqs": cfg["max_num_seqs"],
        "max_num_batched_tokens": cfg["max_num_batched_tokens"],
        "long_prefill_token_threshold": cfg.get("long_prefill_token_threshold", 0),
        "async_scheduling": bool(cfg.get("async_scheduling", False)),
        "watermark": float(cfg.get("watermark", 0.0)),
    }
    timeout = cfg.get("request_timeout_s")  # (clients giving up: a P/D record's)
    return Scenario.model_validate(
        {
            "name": record["stream"],
            **({"workload": {"request_timeout_s": timeout}} if timeout is not None else {}),
            "model": _model_of(cfg),
            "cache": {
                "block_size": cfg["block_size"],
                "num_blocks": cfg["num_gpu_blocks"],
                "prefix_caching": bool(cfg["enable_prefix_caching"]),
            },
            "scheduler": scheduler,
            "simulation": {"num_requests": len(record["requests"])},
        }
    )


#: the model config.json files a record may name (``model``), as the recorder handed them
#: to vLLM
MODELS_DIR = Path(__file__).resolve().parents[2] / "scenarios" / "models"
#: vLLM ``hf_overrides`` a record may carry: config.json keys the scenario's model takes
#: under the same names
HF_OVERRIDES = ("sliding_window", "layer_types")


def _model_of(cfg: dict[str, Any]) -> dict[str, Any]:
    """The model a record names (``model``: a shipped config.json, with vLLM's
    ``hf_overrides`` applied as the same fields), else llama-3-8b's shape (step times do
    not read the model; its KV cache is one full-attention group, as the recorder's)."""
    if not cfg.get("model"):
        return {"preset": "llama-3-8b", "max_model_len": cfg["max_model_len"]}
    model = {"config": str(MODELS_DIR / f"{cfg['model']}.json")}
    for key, value in (cfg.get("hf_overrides") or {}).items():
        if key not in HF_OVERRIDES:
            raise ValueError(f"config.hf_overrides: {key!r} is not replayed")
        model[key] = value
    return model | {"max_model_len": cfg["max_model_len"]}


def stream_requests(record: dict[str, Any]) -> tuple[list[Request], dict[int, str], dict]:
    """The record's requests (ids ranked as vLLM compares its string ids, so that
    ties in priority and arrival break alike), their names and stream positions."""
    rows = record["requests"]
    rank = {name: i for i, name in enumerate(sorted(row["id"] for row in rows))}
    requests, names, index_of = [], {}, {}
    for j, row in enumerate(rows):
        req_id = rank[row["id"]]
        names[req_id], index_of[req_id] = row["id"], j
        requests.append(
            Request(
                req_id=req_id,
                arrival_s=float(row["arrival_s"]),
                prompt=segment_tokens(row["prompt"]),
                output_len=int(row["max_tokens"]),
                priority=-int(row.get("priority", 0)),  # vLLM: lower value first
                n=int(row.get("n", 1)),
            )
        )
    requests.sort(key=lambda r: r.arrival_s)  # (stable: list order within a time)
    return requests, names, index_of


class StepTime:
    """The record's step-time function alone (no notes: for timing pagesim itself)."""

    def __init__(self, coefficients: dict[str, float]):
        self.c = coefficients

    def execute(self, batch) -> float:
        tokens = batch.decode_seq_ids.shape[0] + sum(c.num_tokens for c in batch.prefills)
        seqs = batch.decode_seq_ids.shape[0] + len(batch.prefills)
        return self.c["step"] + self.c["tokens"] * tokens + self.c["seqs"] * seqs

    def decode_steps(self, context_lens: np.ndarray, steps: int) -> np.ndarray:
        """A decode stretch: every step schedules each decode's one token."""
        rows = int(context_lens.shape[0])
        return np.full(steps, self.c["step"] + self.c["tokens"] * rows + self.c["seqs"] * rows)


def replay(record: dict[str, Any], *, notes: bool = True) -> Replayed:
    """Serve the record's stream under pagesim's ``vllm-v1`` profile; without
    ``notes`` the steps are only timed, not noted (what a plain run costs)."""
    scenario = scenario_of(record)
    requests, names, index_of = stream_requests(record)
    env = simpy.Environment()
    done: list = []
    also_done: list = []  # (a prefill instance's hand-offs: its reads start)
    replica = build_replica(
        scenario,
        env,
        0,
        make_executor=lambda _: (
            RecordingExecutor(record["step_time"], names)
            if notes
            else StepTime(record["step_time"])
        ),
        outputs=RecordedOutputs(index_of, {r.req_id for r in requests if r.n > 1}),
        steps=_NoSteps(),
        on_done=lambda outcome: [then(outcome) for then in (done.append, *also_done)],
        requests=requests,
        fast_forward=not notes,  # (noting every step needs them one by one)
    )
    executor = replica.executor
    executor.replica = replica  # (a StepTime ignores it)
    hand_offs = HandOffs(record, replica, names) if record["config"].get("kv_role") else None
    if hand_offs is None:
        cluster = build_cluster(scenario, env, [replica], requests)
        env.process(cluster.arrivals(requests))
    else:
        env.process(hand_offs.arrivals(requests))
        if not hand_offs.decode:
            also_done.append(hand_offs.finished)
    env.run()
    result = Replayed(steps=getattr(executor, "steps", []))
    for outcome in done:
        name = names[outcome.request.req_id]
        result.request_times[name] = {
            "arrival_s": outcome.request.arrival_s,
            "first_token_s": outcome.first_token_s,
            "finished_s": outcome.finish_s,
            "num_preemptions": outcome.num_preemptions,
            **(hand_offs.times.get(name, {}) if hand_offs is not None else {}),
        }
    return result


class HandOffs:
    """One instance of a prefill/decode pair, as a P/D record's stand-in worker
    (bench/parity/pd_worker.py) drives it: on a decode instance (``kv_consumer``) each
    read starts when the planner allocates its blocks and ends ``latency_s + block_s *
    blocks`` later; on a prefill instance (``kv_producer``) a finished request's blocks
    are read that long after it finished (its blocks: the whole prompt's), or, when the
    record marks it ``abandoned``, freed once the lease (``kv_lease_s``) runs out."""

    def __init__(self, record: dict[str, Any], replica: Replica, names: dict[int, str]):
        cfg = record["config"]
        self.decode = cfg["kv_role"] == "kv_consumer"
        self.read = cfg["kv_read"]
        self.lease_s = cfg["kv_lease_s"]
        self.block_size = cfg["block_size"]
        self.replica, self.names = replica, names
        self.env = replica.env
        rows = {row["id"]: row for row in record["requests"]}
        self.flags = {req_id: rows[name] for req_id, name in names.items()}
        self.times: dict[str, dict[str, float]] = {}
        replica.state.peer = PeerConnector(self.block_size)
        replica.state.on_peer_load = self._load

    def read_s(self, blocks: int) -> float:
        return self.read["latency_s"] + self.read["block_s"] * blocks

    def arrivals(self, requests: list[Request]):
        """SimPy process: each request reaches the instance at its arrival time."""
        for request in requests:
            delay = arrival_delay(self.env.now, request.arrival_s)
            if delay > 0:
                yield self.env.timeout(delay)
            if not self.decode:
                self.replica.submit_to_hand_off(request)
            elif self.flags[request.req_id].get("local"):
                self.replica.submit(request)
            else:
                self.replica.submit_handed_off(request, 0)

    def _load(self, load: PeerLoad) -> None:
        name = self.names[load.req_id]
        self.times[name] = {"kv_load_start_s": self.env.now, "kv_load_blocks": load.blocks}
        self.env.process(
            self._after(self.read_s(load.blocks), self.replica.kv_arrived, load.req_id)
        )

    def finished(self, outcome) -> None:
        """Prefill role: the finished request's KV is read (or abandoned) from now."""
        request = outcome.request
        if self.flags[request.req_id].get("abandoned"):
            delay = self.lease_s
        else:
            delay = self.read_s(math.ceil(request.prompt_len / self.block_size))
        self.times[self.names[request.req_id]] = {"kv_sent_s": self.env.now + delay}
        self.env.process(self._after(delay, self.replica.release_held, request.req_id))

    def _after(self, delay: float, then, req_id: int):
        yield self.env.timeout(delay)
        then(req_id)


class _NoSteps:
    def record(self, step, end_s=None) -> None:
        pass

    def record_rows(self, rows, ends) -> None:
        pass


#: What a P/D record notes of each hand-off, compared as the request's times are: when
#: a decode instance's read started and its blocks, when a prefill instance's ended.
HAND_OFF_TIMES = ("kv_load_start_s", "kv_load_blocks", "kv_sent_s")

DECISIONS = ("scheduled", "preempted", "new", "prefix_hits", "free_blocks", "finished")


def _same(field_name: str, ours, theirs) -> bool:
    if field_name in ("preempted", "new", "finished"):
        return sorted(ours) == sorted(theirs)
    return ours == theirs


def step_difference(index: int, ours: dict, theirs: dict) -> str | None:
    """What differs in one step (None: the same decisions at the same times)."""
    problems = [
        f"{name}: pagesim {ours[name]!r}, vllm {theirs[name]!r}"
        for name in DECISIONS
        if not _same(name, ours[name], theirs[name])
    ]
    for name in ("t_start", "t_end"):
        if not math.isclose(ours[name], theirs[name], rel_tol=0, abs_tol=TIME_TOLERANCE_S):
            problems.append(f"{name}: pagesim {ours[name]!r}, vllm {theirs[name]!r}")
    if not problems:
        return None
    return f"step {index} (t={theirs['t_start']:.6f}): " + "; ".join(problems)


@dataclass
class Parity:
    steps: int  # steps the real scheduler took
    identical: int  # leading steps identical (the replay diverges after them)
    first_difference: str | None
    requests_differing: int

    @property
    def ok(self) -> bool:
        return self.first_difference is None and self.requests_differing == 0


def compare(record: dict[str, Any], replayed: Replayed) -> Parity:
    theirs = folded(record["steps"])
    first = None
    identical = 0
    for index, (ours_step, their_step) in enumerate(zip(replayed.steps, theirs)):
        first = step_difference(index, ours_step, their_step)
        if first is not None:
            break
        identical += 1
    if first is None and len(replayed.steps) != len(theirs):
        first = f"steps: pagesim took {len(replayed.steps)}, vllm {len(theirs)}"
    differing = 0
    for name, times in parent_times(record["request_times"]).items():
        ours = replayed.request_times.get(name)
        keys = ("first_token_s", "finished_s", *(k for k in HAND_OFF_TIMES if k in times))
        if ours is None or any(not _same_time(ours.get(k), times[k]) for k in keys):
            differing += 1
    return Parity(len(theirs), identical, first, differing)


def folded(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recorded steps with each one that scheduled nothing but preempted (vLLM's
    empty step) folded into the next: pagesim plans again at once and the next step's
    record carries those preemptions (Replica._run_planned)."""
    out: list[dict[str, Any]] = []
    carried: list[str] = []
    for step in steps:
        if not step["scheduled"] and step["preempted"]:
            carried += step["preempted"]
            continue
        if carried:
            step = {**step, "preempted": carried + step["preempted"]}
            carried = []
        out.append(step)
    return out


def _same_time(ours: float | None, theirs: float | None) -> bool:
    """Two recorded times agree: both within the tolerance, or both never (an aborted
    request's finish: None in a record, NaN in an outcome)."""
    never = (theirs is None, ours is None or math.isnan(ours))
    if any(never):
        return all(never)
    return math.isclose(ours, theirs, rel_tol=0, abs_tol=TIME_TOLERANCE_S)


def parent_times(times: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per-request times with a fanned-out request's children (``parent#k``) folded
    into their parent: its first token is the first child's, its finish the last's."""
    parents: dict[str, dict[str, float]] = {}
    for name, row in times.items():
        parent = name.split("#")[0]
        if parent not in parents:
            parents[parent] = dict(row)
            continue
        merged = parents[parent]
        merged["first_token_s"] = min(merged["first_token_s"], row["first_token_s"])
        merged["finished_s"] = max(merged["finished_s"], row["finished_s"])
    return parents
