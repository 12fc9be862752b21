"""The Chrome / Perfetto trace of a run (sim.output.trace): the trace-event format's
structure, checked by a validator written here; its content against the run it came
from; bytes that repeat; gzip; and `pagesim run --export-trace` end to end."""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

import sim.output.trace as trace_module
from sim.cli import main
from sim.config.loader import load_scenario
from sim.engine.records import STEP_FIELDS, UNFINISHED_REASON, RequestOutcome
from sim.output.steplog import StepLog
from sim.output.trace import trace_event_count, write_trace
from sim.run.runner import simulate
from sim.workload.request import Request

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "scenarios" / "tiny.yaml"
#: Two replicas, a small pool and a short horizon: preemptions, requests rejected for
#: size, and requests unfinished (queued or decoding) when the run stops.
STRESS = (
    "cache.num_blocks=48",
    "routing.replicas=2",
    "workload.input.max=900",
    "workload.output.min=100",
    "workload.output.max=200",
    "simulation.num_requests=100",
    "simulation.max_sim_time_s=1.2",
)
NS_US = 1e-3  # one nanosecond, the trace's resolution, in trace microseconds
METADATA = {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_trace(doc: dict) -> list[dict]:
    """Assert what the trace-event format requires of ``doc`` (the JSON object form) and
    what viewers need to draw it; return its events."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    assert "displayTimeUnit" not in doc  # older Perfetto read "ms" as the unit of ts
    events = doc["traceEvents"]
    processes, threads, used = set(), {}, set()
    for ev in events:
        assert isinstance(ev["ph"], str) and len(ev["ph"]) == 1, ev
        assert is_number(ev["ts"]) and ev["ts"] >= 0, ev
        assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int), ev
        assert isinstance(ev["name"], str) and ev["name"], ev
        if ev["ph"] == "M":
            assert ev["name"] in METADATA and isinstance(ev["args"], dict), ev
            if ev["name"] == "process_name":
                processes.add(ev["pid"])
            if ev["name"] == "thread_name":
                # A tid names one thread of one process (viewers that follow Linux
                # take a tid under two pids for a reused thread).
                assert threads.setdefault(ev["tid"], ev["pid"]) == ev["pid"], ev
            continue
        used.add((ev["pid"], ev["tid"]))
        if ev["ph"] == "X":
            assert is_number(ev["dur"]) and ev["dur"] >= 0, ev
        elif ev["ph"] == "C":
            assert ev["args"] and all(is_number(v) for v in ev["args"].values()), ev
        elif ev["ph"] in "ben":
            assert isinstance(ev["cat"], str) and isinstance(ev["id"], (int, str)), ev
        else:
            pytest.fail(f"unexpected phase {ev['ph']!r}")
    for pid, tid in used:
        assert pid in processes and threads.get(tid) == pid, (pid, tid)
    check_nesting(events)
    return events


def check_nesting(events: list[dict]) -> None:
    """As a viewer reads them (in whole ns, as Perfetto does, stable-sorted by ts): b/e
    pairs balance and nest per (pid, cat, id), an e closing the innermost open b of its
    name; X slices on a thread never overlap without nesting."""

    def ns(us: float) -> int:
        return round(us * 1000)

    ordered = sorted(events, key=lambda ev: ns(ev["ts"]))
    stacks: dict[tuple, list[dict]] = defaultdict(list)
    open_x: dict[tuple, list[int]] = defaultdict(list)
    for ev in ordered:
        if ev["ph"] in "be":
            stack = stacks[(ev["pid"], ev["cat"], ev["id"])]
            if ev["ph"] == "b":
                stack.append(ev)
            else:
                assert stack and stack[-1]["name"] == ev["name"], ev
                assert ns(stack.pop()["ts"]) <= ns(ev["ts"])
        elif ev["ph"] == "X":
            ends = open_x[(ev["pid"], ev["tid"])]
            while ends and ends[-1] <= ns(ev["ts"]):
                ends.pop()
            end = ns(ev["ts"]) + ns(ev["dur"])
            assert not ends or end <= ends[-1], ev
            ends.append(end)
    assert not any(stacks.values()), "unclosed async slices"


def read(path: Path) -> dict:
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if path.suffix == ".gz" else data)


def run(*overrides: str):
    scenario = load_scenario(TINY, list(overrides))
    return scenario, simulate(scenario)


@pytest.fixture(scope="module")
def tiny():
    return run()


@pytest.fixture(scope="module")
def stress():
    return run(*STRESS)


def written(result, tmp_path, fmt="json") -> dict:
    pool = result.summary["num_blocks"]
    path = write_trace(tmp_path, result.outcomes, result.steps, pool, fmt=fmt, title="t")
    return read(path)


def by_request(events) -> dict[int, list[dict]]:
    found = defaultdict(list)
    for ev in events:
        if ev["ph"] in "ben":
            found[ev["id"]].append(ev)
    return found


@pytest.mark.parametrize("case", ["tiny", "stress"])
def test_the_trace_is_well_formed_and_counted(case, request, tmp_path):
    _, result = request.getfixturevalue(case)
    doc = written(result, tmp_path)
    events = check_trace(doc)
    assert len(events) == doc["otherData"]["events"]
    assert len(events) == trace_event_count(result.outcomes, result.steps)
    # One event a line, each in canonical form (what makes the bytes repeatable).
    lines = (tmp_path / "trace.json").read_text().splitlines()[1:-2]
    assert len(lines) == len(events)
    for line in lines:
        text = line.removesuffix(",")
        assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


def test_one_step_slice_and_counter_samples_per_step(stress, tmp_path):
    _, result = stress
    events = check_trace(written(result, tmp_path))
    names = {ev["pid"]: ev["args"]["name"] for ev in events if ev["name"] == "process_name"}
    assert names == {1: "replica 0", 2: "replica 1"}
    rows = result.steps.as_array()
    replica = rows[:, 1].astype(int)
    pool = result.summary["num_blocks"]
    for r in (0, 1):
        mine = rows[replica == r]
        slices = [ev for ev in events if ev["ph"] == "X" and ev["pid"] == r + 1]
        assert len(slices) == len(mine) > 0
        ts = np.array([ev["ts"] for ev in slices])
        dur = np.array([ev["dur"] for ev in slices])
        assert np.allclose(ts, mine[:, 0] * 1e6, rtol=0, atol=NS_US)
        assert np.allclose(ts + dur, (mine[:, 0] + mine[:, 2]) * 1e6, rtol=0, atol=NS_US)
        assert [ev["args"]["prefill_tokens"] for ev in slices] == mine[:, 4].astype(int).tolist()
        preempted = mine[:, STEP_FIELDS.index("num_preempted")].astype(int).tolist()
        assert [ev["args"]["preempted"] for ev in slices] == preempted
        counters = defaultdict(list)
        for ev in events:
            if ev["ph"] == "C" and ev["pid"] == r + 1:
                counters[ev["name"]].append(ev["args"])
        used = [a["fraction"] for a in counters["KV used"]]
        assert used == (mine[:, 6] / pool).tolist()
        assert [a["blocks"] for a in counters["KV cached"]] == mine[:, 7].astype(int).tolist()
        load = [a for a in counters["requests"] if a != {"running": 0, "waiting": 0}]
        assert [a["running"] for a in load] == mine[:, 3].astype(int).tolist()
        waiting = mine[:, STEP_FIELDS.index("queue_len")].astype(int).tolist()
        assert [a["waiting"] for a in load] == waiting
    assert sum(ev["args"]["preempted"] for ev in events if ev["ph"] == "X") > 0


def phases(events: list[dict]) -> list[tuple[str, float, float]]:
    begins, found = {}, []
    for ev in events:
        if ev["ph"] == "b":
            begins[ev["name"]] = ev["ts"]
        elif ev["ph"] == "e":
            found.append((ev["name"], begins.pop(ev["name"]), ev["ts"]))
    return found


def test_one_async_slice_per_request_with_its_phases_and_preemptions(stress, tmp_path):
    _, result = stress
    events = check_trace(written(result, tmp_path))
    run_end = max(ev["ts"] + ev["dur"] for ev in events if ev["ph"] == "X")
    requests = by_request(events)
    assert set(requests) == {o.req_id for o in result.outcomes}
    kinds = Counter()
    for o in result.outcomes:
        mine = requests[o.req_id]
        assert {(ev["pid"], ev["tid"]) for ev in mine} == {(o.replica + 1, 10 * o.replica + 12)}
        assert all(ev["cat"] == "request" for ev in mine)
        instants = [ev for ev in mine if ev["ph"] == "n"]
        if o.rejected_reason and o.rejected_reason != UNFINISHED_REASON:
            kinds["rejected"] += 1
            assert [ev["name"] for ev in mine] == ["rejected"]
            assert mine[0]["args"]["reason"] == o.rejected_reason
            assert mine[0]["ts"] == pytest.approx(o.arrival_s * 1e6, abs=NS_US)
            continue
        spans = phases(mine)
        assert spans[-1][0] == "request" and sum(name == "request" for name, *_ in spans) == 1
        assert mine[0]["args"]["req_id"] == o.req_id
        assert [ev["name"] for ev in instants] == ["preempted"] * o.num_preemptions
        assert [ev["ts"] for ev in instants] == pytest.approx(
            [t * 1e6 for t in o.preemption_times], abs=NS_US
        )
        times = [o.arrival_s, o.first_scheduled_s, o.first_token_s, o.finish_s]
        if o.finished:
            kinds["finished"] += 1
        else:
            kinds["unfinished"] += 1
            assert "unfinished" in mine[0]["args"]["note"]
            known = [t for t in times if not math.isnan(t)]
            times = [*known, max(run_end / 1e6, known[-1])]
        names = ["queued", "prefill", "decode"][: len(times) - 1]
        expected = [(n, times[k] * 1e6, times[k + 1] * 1e6) for k, n in enumerate(names)]
        expected.append(("request", times[0] * 1e6, times[-1] * 1e6))
        assert [name for name, *_ in spans] == [name for name, *_ in expected]
        assert np.allclose([s[1:] for s in spans], [e[1:] for e in expected], atol=NS_US)
    assert min(kinds["rejected"], kinds["finished"], kinds["unfinished"]) > 0, kinds
    assert sum(o.num_preemptions for o in result.outcomes) > 0


def outcome(req_id, arrival, scheduled=math.nan, token=math.nan, finish=math.nan, **kw):
    request = Request(req_id, arrival, np.zeros(8, dtype=np.int32), 4)
    reason = kw.pop("reason", "" if not math.isnan(finish) else UNFINISHED_REASON)
    times = kw.pop("preemptions", ())
    return RequestOutcome(
        request, 0, scheduled, token, finish, 0, len(times), 0, reason, tuple(times)
    )


def test_unfinished_phases_end_at_the_run_end_and_instants_stay_inside():
    steps = StepLog()
    steps.record((1.0, 0, 1.0, 1, 8, 0, 1, 0, 0, 7, 8, 0, 8, 0, 112, 0, 0, 0, 0))
    outcomes = [
        outcome(0, 0.5, 1.0, preemptions=(1.5,)),  # stopped in its prefill
        outcome(1, 0.2, 0.4, 0.6, 3.0),  # finished after the last step ended
        outcome(2, 5.0),  # arrived after the run's last step
        outcome(3, 0.1, reason="too long"),
    ]
    doc = {
        "traceEvents": [json.loads(line) for line in trace_module.trace_lines(outcomes, steps, 8)]
    }
    requests = by_request(check_trace(doc))
    assert phases(requests[0]) == [
        ("queued", 5e5, 1e6),
        ("prefill", 1e6, 2e6),
        ("request", 5e5, 2e6),
    ]
    assert [ev["ts"] for ev in requests[0] if ev["ph"] == "n"] == [1.5e6]
    assert phases(requests[1])[-1] == ("request", 2e5, 3e6)
    assert phases(requests[2]) == [("queued", 5e6, 5e6), ("request", 5e6, 5e6)]
    assert [ev["name"] for ev in requests[3]] == ["rejected"]
    assert len(doc["traceEvents"]) == trace_event_count(outcomes, steps)
    # The replica's one step is its last and it held unfinished work: no idle sample.
    load = [ev for ev in doc["traceEvents"] if ev["name"] == "requests" and ev["ph"] == "C"]
    assert [ev["args"] for ev in load] == [{"running": 1, "waiting": 0}]


def test_the_same_run_gives_the_same_bytes_and_gzip_round_trips(tiny, tmp_path):
    _, first = tiny
    _, again = run()
    paths = {}
    for name, result in (("a", first), ("b", again)):
        for fmt in ("json", "gzip"):
            folder = tmp_path / f"{name}-{fmt}"
            folder.mkdir()
            paths[name, fmt] = write_trace(
                folder, result.outcomes, result.steps, 128, fmt=fmt, title="t"
            )
    for fmt in ("json", "gzip"):
        assert paths["a", fmt].read_bytes() == paths["b", fmt].read_bytes()
    packed = paths["a", "gzip"].read_bytes()
    assert paths["a", "gzip"].name == "trace.json.gz" and packed[:2] == b"\x1f\x8b"
    assert packed[3] == 0 and packed[4:8] == bytes(4)  # no file name, mtime 0
    assert gzip.decompress(packed) == paths["a", "json"].read_bytes()


def test_auto_compresses_large_traces(tiny, tmp_path, monkeypatch):
    _, result = tiny
    count = trace_event_count(result.outcomes, result.steps)
    monkeypatch.setattr(trace_module, "GZIP_THRESHOLD_EVENTS", count)
    (tmp_path / "at").mkdir()
    assert write_trace(tmp_path / "at", result.outcomes, result.steps, 128).name == "trace.json"
    monkeypatch.setattr(trace_module, "GZIP_THRESHOLD_EVENTS", count - 1)
    (tmp_path / "over").mkdir()
    path = write_trace(tmp_path / "over", result.outcomes, result.steps, 128)
    assert path.name == "trace.json.gz"
    with pytest.raises(ValueError, match="trace format"):
        write_trace(tmp_path, result.outcomes, result.steps, 128, fmt="xml")


def test_cli_export_trace_end_to_end(tmp_path, capsys):
    base = ["run", str(TINY), "--quiet", "--no-report"]
    assert main([*base, "--out", str(tmp_path / "plain")]) == 0
    assert main([*base, "--out", str(tmp_path / "traced"), "--export-trace"]) == 0
    assert f"wrote {tmp_path / 'traced' / 'trace.json'}" in capsys.readouterr().out
    assert main([*base, "--out", str(tmp_path / "packed"), "--export-trace=gzip"]) == 0
    plain = sorted(p.name for p in (tmp_path / "plain").iterdir())
    assert "trace.json" not in plain and "trace.json.gz" not in plain
    for name in plain:  # the trace is opt-in and changes no other file
        if name != "metadata.json":
            expected = (tmp_path / "plain" / name).read_bytes()
            assert (tmp_path / "traced" / name).read_bytes() == expected
    doc = read(tmp_path / "traced" / "trace.json")
    events = check_trace(doc)
    steps = sum(1 for line in (tmp_path / "plain" / "steps.csv").open()) - 1
    assert sum(ev["ph"] == "X" for ev in events) == steps
    assert doc["otherData"]["title"] == "tiny"
    assert read(tmp_path / "packed" / "trace.json.gz") == doc
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--export-trace", str(TINY), "--out", str(tmp_path / "x")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--export-trace=json" in err[0]


GOOD = [
    {
        "args": {"name": "replica 0"},
        "name": "process_name",
        "ph": "M",
        "pid": 1,
        "tid": 11,
        "ts": 0,
    },
    {"args": {"name": "steps"}, "name": "thread_name", "ph": "M", "pid": 1, "tid": 11, "ts": 0},
    {"dur": 2, "name": "decode", "ph": "X", "pid": 1, "tid": 11, "ts": 1},
    {"dur": 2, "name": "decode", "ph": "X", "pid": 1, "tid": 11, "ts": 3},
    {"args": {"running": 1}, "name": "requests", "ph": "C", "pid": 1, "tid": 11, "ts": 1},
    {"cat": "request", "id": 7, "name": "request", "ph": "b", "pid": 1, "tid": 11, "ts": 1},
    {"cat": "request", "id": 7, "name": "queued", "ph": "b", "pid": 1, "tid": 11, "ts": 1},
    {"cat": "request", "id": 7, "name": "queued", "ph": "e", "pid": 1, "tid": 11, "ts": 2},
    {"cat": "request", "id": 7, "name": "request", "ph": "e", "pid": 1, "tid": 11, "ts": 2},
]
BROKEN = {
    "no pid": (2, {"pid": None}),
    "ts in a string": (2, {"ts": "1"}),
    "negative dur": (2, {"dur": -1}),
    "overlapping steps": (3, {"ts": 2}),
    "counter of text": (4, {"args": {"running": "one"}}),
    "unnamed thread": (4, {"tid": 12}),
    "end of another name": (7, {"name": "prefill"}),
    "end before its begin": (8, {"ts": 0.5}),
    "end without a begin": (8, {"id": 8}),
    "unclosed slice": (8, {"ph": "n"}),
}


def test_the_checker_passes_a_good_trace_and_catches_broken_ones():
    check_trace({"traceEvents": GOOD})
    for case, (index, change) in BROKEN.items():
        events = [dict(ev) for ev in GOOD]
        events[index].update(change)
        with pytest.raises((AssertionError, KeyError, TypeError)):
            check_trace({"traceEvents": events})
            pytest.fail(case)
