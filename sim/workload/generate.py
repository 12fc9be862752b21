"""The request stream: arrivals, lengths, shared prefixes, sessions, token ids.

:class:`~sim.config.workload.WorkloadSpec` (a section of the scenario) describes the traffic;
:func:`generate_requests` turns it into a list of :class:`~sim.workload.request.Request` sorted by
arrival time with ``req_id`` = index.

Token ids are synthesised so that the prefix cache sees exactly the sharing the workload
describes and nothing else, and are built only when read (:mod:`sim.workload.prompts`:
a request holds its prompt's length and the run's :class:`PromptBook`, no token array):

* a request's own tokens are a pure function of (seed, req_id, position), uniform in
  ``[0, vocab)``, so two requests share a full block by accident with probability
  ``vocab ** -block_size`` (nil);
* a prefix group's system prompt is built once and starts every request of the group;
* a session turn's prompt is the previous turn's prompt, then the previous turn's output
  tokens, then new user tokens;
* a Mooncake ``hash_id`` stands for one 512-token block whose tokens are a pure function
  of (seed, hash id), so equal hash ids give equal tokens in any request.

Output tokens are a pure function :func:`output_token_ids` of (seed, stream, position):
the engine calls it to synthesise what each sequence decodes, and the prompt book calls
it to build the next session turn, so both agree token for token. The seed is
``scenario.simulation.seed`` (``token_seed`` of :func:`generate_requests`); the run's
generator draws lengths, arrivals and labels only.

Simplification: a session's next turn arrives ``think time`` after the previous turn's
*arrival*, not after its completion; the engine does not feed completion times back into
the workload (the stream is generated once, up front).

Clipping: every request has at least one prompt token and one output token and
``prompt + output <= model.max_model_len``. Own tokens are cut first, then the output.
A session ends early when its history alone leaves no room for another turn.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import numpy as np

from sim.config.arrivals import TraceArrival
from sim.config.workload import (
    CategoricalSpec,
    EmpiricalLength,
    PrefixGroupsSpec,
    SessionsSpec,
    WorkloadSpec,
)
from sim.inputs.tables import load_length_table
from sim.inputs.user_errors import UserError
from sim.workload.prompts import PromptBook
from sim.workload.request import Request
from sim.workload.sampling import arrival_times, sample_lengths


class ModelLimits(Protocol):
    """What generation needs from a ModelSpec."""

    vocab_size: int
    max_model_len: int


class _Plan(NamedTuple):
    """Per-request columns before token synthesis (all int64 but arrival_s)."""

    arrival_s: np.ndarray
    own_len: np.ndarray
    output_len: np.ndarray
    prefix_group: np.ndarray
    session: np.ndarray
    turn: np.ndarray
    tenant: np.ndarray
    priority: np.ndarray
    source_row: np.ndarray  # trace row, -1 for synthetic requests
    entry: np.ndarray  # prompt-pool entry, -1 without a pool


def generate_requests(
    scenario_or_workload: Any,
    model: ModelLimits,
    *,
    num_requests: int | None = None,
    duration_s: float | None = None,
    rng: np.random.Generator,
    token_seed: int | None = None,
) -> list[Request]:
    """The request stream, sorted by arrival, ``req_id`` = index.

    Accepts a Scenario (its ``workload``; ``num_requests``, ``duration_s`` and the token
    seed default to its ``simulation`` section) or a bare WorkloadSpec (token seed 0).
    Generation stops at ``num_requests`` or at ``duration_s``, whichever comes first (a
    trace replays whole without either).
    Draws only from ``rng``; mutates nothing else. Raises ValueError if neither limit
    is given, TraceError/LengthTableError for a bad file.
    """
    spec = getattr(scenario_or_workload, "workload", scenario_or_workload)
    sim = getattr(scenario_or_workload, "simulation", None)
    if sim is not None:
        num_requests = sim.num_requests if num_requests is None else num_requests
        duration_s = sim.duration_s if duration_s is None else duration_s
        token_seed = sim.seed if token_seed is None else token_seed
    replay = isinstance(spec.arrival, TraceArrival)
    if num_requests is None and duration_s is None and not replay:
        raise ValueError("generate_requests needs num_requests or duration_s")
    token_seed = 0 if token_seed is None else token_seed
    if isinstance(spec.arrival, TraceArrival):
        plan, prefixes = _plan_trace(spec, model, num_requests, duration_s), []
    else:
        prefixes = _prefix_lengths(spec.prefix, model, rng)
        plan = _plan_synthetic(spec, model, rng, num_requests, duration_s, prefixes)
    return _build_requests(spec, model, plan, prefixes, token_seed)


def _prefix_lengths(prefix: PrefixGroupsSpec, model: ModelLimits, rng) -> list[int]:
    if prefix.num_groups == 0:
        return []
    lengths = sample_lengths(prefix.length, prefix.num_groups, rng, "input")
    # leave room for one own token and one output token
    return [int(x) for x in np.minimum(lengths, max(model.max_model_len - 2, 0))]


def _plan_synthetic(spec, model, rng, num_requests, duration_s, prefixes) -> _Plan:
    starts = arrival_times(spec.arrival, rng, num_requests, duration_s)
    units = len(starts)
    group = _pick_groups(spec.prefix, units, rng)
    tenant = spec.tenants.sample(units, rng)
    priority = spec.priorities.sample(units, rng)
    if spec.sessions is None:
        turns = np.ones(units, dtype=np.int64)
        offsets = np.zeros(units)
    else:
        turns = sample_lengths(spec.sessions.turns, units, rng, "input")
        offsets = _think_offsets(spec.sessions, turns, rng)
    unit = np.repeat(np.arange(units), turns)
    turn = np.arange(len(unit)) - np.repeat(np.cumsum(turns) - turns, turns)
    own = _paired_lengths(spec, len(unit), rng)
    entry = np.full(len(unit), -1, dtype=np.int64)
    if spec.prompts is not None:
        entry, group, entry_len = _pool_entries(spec, units, rng)
        own = (entry_len[entry], own[1])
    # group -1 (no prefix) indexes the trailing 0
    prefix_len = np.asarray(prefixes + [0], dtype=np.int64)[group[unit]]
    own_len, output_len, keep = _clip(own[0], own[1], prefix_len, turn, model.max_model_len)
    arrival = starts[unit] + offsets
    if duration_s is not None:
        keep &= arrival < duration_s
    session = unit if spec.sessions is not None else np.full(len(unit), -1, dtype=np.int64)
    columns = (arrival, own_len, output_len, group[unit], session, turn, tenant[unit])
    columns += (priority[unit], np.full(len(unit), -1, dtype=np.int64), entry)
    plan = _Plan(*(c[keep] for c in columns))
    return _sorted_prefix(plan, num_requests)


def _pool_entries(spec: WorkloadSpec, size: int, rng):
    """(entry per request, its prefix group, each entry's own length) of a prompt pool:
    entry e belongs to group e mod num_groups (-1 without groups); lengths are drawn once
    per entry, so a repeated prompt is the same prompt."""
    pool = spec.prompts
    entry_len = sample_lengths(spec.input, pool.distinct, rng, "input")
    if pool.order == "cycle":
        order = rng.permutation(pool.distinct)
        entry = order[np.arange(size) % pool.distinct]
    else:
        entry = rng.integers(0, pool.distinct, size=size)
    groups = spec.prefix.num_groups
    group = entry % groups if groups else np.full(size, -1, dtype=np.int64)
    return entry.astype(np.int64), group.astype(np.int64), entry_len


def _pick_groups(prefix: PrefixGroupsSpec, size: int, rng) -> np.ndarray:
    """Prefix group per unit, -1 for none."""
    if prefix.num_groups == 0:
        return np.full(size, -1, dtype=np.int64)
    picker = CategoricalSpec(
        count=prefix.num_groups, pick=prefix.pick, zipf_exponent=prefix.zipf_exponent
    )
    groups = picker.sample(size, rng)
    return np.where(rng.random(size) < prefix.fraction, groups, -1)


def _think_offsets(sessions: SessionsSpec, turns: np.ndarray, rng) -> np.ndarray:
    """Arrival offset of every turn from its session's start (0 for the first turn)."""
    total = int(turns.sum())
    if sessions.think_time == "fixed":
        gaps = np.full(total, sessions.think_time_s)
    else:
        gaps = rng.exponential(sessions.think_time_s, total) if sessions.think_time_s else None
        gaps = np.zeros(total) if gaps is None else gaps
    first = np.cumsum(turns) - turns
    gaps[first] = 0.0
    run = np.cumsum(gaps)
    return run - np.repeat(run[first], turns)


def _paired_lengths(spec: WorkloadSpec, size: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """Own prompt and output lengths; one empirical two-column file is sampled by row."""
    rows = None
    same_table = (
        isinstance(spec.input, EmpiricalLength)
        and isinstance(spec.output, EmpiricalLength)
        and spec.input.resolved_path == spec.output.resolved_path
    )
    if same_table:
        rows = rng.integers(0, load_length_table(spec.input.resolved_path).shape[0], size=size)
    own = sample_lengths(spec.input, size, rng, "input", rows)
    out = sample_lengths(spec.output, size, rng, "output", rows)
    return own, out


def _clip(own, out, prefix_len, turn, max_len: int):
    """Clip to ``prompt + output <= max_len`` (each >= 1); returns (own, out, keep).
    Session turns carry their history (previous prompt + output); a turn without room
    for one own and one output token ends its session (``keep`` false from there on)."""
    if turn.max(initial=0) > 0:
        return _clip_sessions(own, out, prefix_len, turn, max_len)
    # without sessions the history is the system prompt, already <= max_len - 2
    clipped_own = np.clip(own, 1, max_len - 1 - prefix_len)
    clipped_out = np.clip(out, 1, max_len - prefix_len - clipped_own)
    _check_clipping((clipped_own != own) | (clipped_out != out), max_len)
    return clipped_own, clipped_out, np.ones(len(own), dtype=bool)


#: Above this fraction of requests cut to fit max_model_len, the lengths are an error.
MAX_CLIPPED_FRACTION = 0.5


class WorkloadError(UserError, ValueError):
    """Generated requests that do not mean what the scenario asked for; ``field`` is
    the scenario field to change."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def _check_clipping(clipped: np.ndarray, max_len: int) -> None:
    """A length distribution that mostly overshoots the model is a mistake, not a
    distribution: cutting most requests to fit would silently change the workload."""
    if clipped.size >= 10 and clipped.mean() > MAX_CLIPPED_FRACTION:
        raise WorkloadError(
            "workload.input",
            f"{clipped.mean():.0%} of the drawn prompt + output lengths exceed the model's "
            f"max_model_len ({max_len}) and would be cut to fit; shorten the lengths or "
            "raise model.max_model_len",
        )


def _clip_sessions(own, out, prefix_len, turn, max_len: int):
    """Sequential, since each turn's room depends on the clipped previous turn. Plain
    Python lists: numpy scalar indexing would cost ~10x in this loop."""
    own_list, out_list, keep = own.tolist(), out.tolist(), [True] * len(own)
    prefix_list, turn_list = prefix_len.tolist(), turn.tolist()
    history = ended = 0
    for i, t in enumerate(turn_list):
        if t == 0:
            history, ended = prefix_list[i], False
        else:
            history += own_list[i - 1] + out_list[i - 1]
        if ended or history + 2 > max_len:
            keep[i], ended = False, True
            continue
        own_list[i] = min(own_list[i], max_len - 1 - history)
        out_list[i] = min(out_list[i], max_len - history - own_list[i])
    own_array = np.asarray(own_list, dtype=np.int64)
    return own_array, np.asarray(out_list, dtype=np.int64), np.asarray(keep)


def _sorted_prefix(plan: _Plan, num_requests: int | None) -> _Plan:
    """Sort by arrival (ties keep generation order, so a turn never precedes its
    predecessor) and keep the first ``num_requests``: a prefix in time, so every kept
    turn's predecessors are kept too."""
    order = np.argsort(plan.arrival_s, kind="stable")[:num_requests]
    return _Plan(*(column[order] for column in plan))


def _plan_trace(spec, model, num_requests, duration_s) -> _Plan:
    trace = spec.arrival.trace()
    arrival = trace.arrival_s * spec.arrival.time_scale
    order = np.argsort(arrival, kind="stable")
    if duration_s is not None:
        order = order[arrival[order] < duration_s]
    order = order[:num_requests]
    max_len = model.max_model_len
    own = np.clip(trace.input_len[order], 1, max_len - 1)
    out = np.clip(trace.output_len[order], 1, np.maximum(max_len - own, 1))
    size = len(order)
    minus_one = np.full(size, -1, dtype=np.int64)
    zeros = np.zeros(size, dtype=np.int64)
    return _Plan(
        arrival[order], own, out, minus_one, minus_one, zeros, zeros, zeros, order, minus_one
    )


def _build_requests(spec, model, plan: _Plan, prefixes, token_seed) -> list[Request]:
    """Requests holding their prompt's length and the book that builds it."""
    previous = _previous_turn(plan)
    prefix_len = np.asarray(prefixes + [0], dtype=np.int64)[plan.prefix_group]
    if isinstance(spec.arrival, TraceArrival):
        book, prompt_len = _trace_book(spec, model, plan, token_seed), plan.own_len
    else:
        book = PromptBook(
            token_seed,
            model.vocab_size,
            plan.own_len,
            output_len=plan.output_len if spec.sessions is not None else None,
            previous=previous if spec.sessions is not None else None,
            group=plan.prefix_group if prefixes else None,
            group_len=prefixes,
            own_key=plan.entry if spec.prompts is not None else None,
        )
        prompt_len = _prompt_lengths(plan, previous, prefix_len)
    columns = (plan.arrival_s, plan.output_len, plan.tenant, plan.priority, plan.prefix_group)
    columns += (plan.session, plan.turn)
    rows = zip(prompt_len.tolist(), *(c.tolist() for c in columns))
    n = spec.n
    return [
        Request(i, a, None, out, ten, pri, grp, ses, turn, n, prompt_len=length, source=book)
        for i, (length, a, out, ten, pri, grp, ses, turn) in enumerate(rows)
    ]


def _trace_book(spec, model, plan: _Plan, token_seed: int) -> PromptBook:
    """Trace rows' prompts: their hash-id blocks, then own tokens past them."""
    hashes = spec.arrival.trace().hash_ids
    if hashes is None:
        prompt_id = spec.arrival.trace().prompt_id
        if prompt_id is None:
            return PromptBook(token_seed, model.vocab_size, plan.own_len)
        # equal keys, equal own tokens; a row without a key is its own prompt (keys past
        # every shared one)
        ids = prompt_id[plan.source_row]
        unique = np.int64(prompt_id.max(initial=-1) + 1) + np.arange(len(ids), dtype=np.int64)
        keys = np.where(ids >= 0, ids, unique)
        return PromptBook(token_seed, model.vocab_size, plan.own_len, own_key=keys)
    block = spec.arrival.block_tokens
    ids = [hashes[row] for row in plan.source_row.tolist()]
    covered = np.asarray([len(h) * block for h in ids], dtype=np.int64)
    hashed = np.minimum(plan.own_len, covered)
    own_len = plan.own_len - hashed
    return PromptBook(
        token_seed, model.vocab_size, own_len, hash_ids=ids, hashed_len=hashed, hash_block=block
    )


def _prompt_lengths(plan: _Plan, previous: np.ndarray, prefix_len: np.ndarray) -> np.ndarray:
    """Each prompt's length: its group's prompt, its session's history, its own tokens.
    A turn's previous turn comes earlier in arrival order, so one pass suffices."""
    lengths = prefix_len + plan.own_len
    if previous.max(initial=-1) < 0:
        return lengths
    out, own, before = plan.output_len.tolist(), plan.own_len.tolist(), previous.tolist()
    found = lengths.tolist()
    for i, p in enumerate(before):
        if p >= 0:
            found[i] = found[p] + out[p] + own[i]
    return np.asarray(found, dtype=np.int64)


def _previous_turn(plan: _Plan) -> np.ndarray:
    """Index of each request's previous turn in its session, -1 for none. Kept turns of
    a session are 0..k (see _sorted_prefix), so the previous turn is the neighbour in
    (session, turn) order."""
    previous = np.full(len(plan.turn), -1, dtype=np.int64)
    by_session = np.lexsort((plan.turn, plan.session))
    session = plan.session[by_session]
    same = (session[1:] == session[:-1]) & (session[1:] >= 0)
    previous[by_session[1:][same]] = by_session[:-1][same]
    return previous
