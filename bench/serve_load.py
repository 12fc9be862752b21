"""``pagesim serve`` under load, on loopback: N concurrent streaming clients (a share of
them going away after their first token), while /health and /metrics are read every
quarter second. Prints what held: /health answered every time, the metrics never went
backwards or negative and balanced at every scrape (received = finished + rejected +
running + waiting: the engine changes them under the lock /metrics reads under), every
request finished once in the engine (a client that left
does not cancel its request: ``vllm:request_success_total`` grows by N), and the
server's memory: a first round warms its caches, a second must not grow it further.

    .venv/bin/python bench/serve_load.py   # 200 clients, a fifth leave early (docs tests run it)
    .venv/bin/python bench/serve_load.py --clients 40     # a lighter load

Exit code 1 when a check fails. Loopback only; the server is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "tiny.yaml"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def metric(text: str, name: str) -> float:
    """The sum of a metric's samples over its labels."""
    pattern = re.compile(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+-]+)$", re.M)
    return sum(float(v) for v in pattern.findall(text))


def start_server(threads: int) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sim.cli",
            "serve",
            str(SCENARIO),
            "--port",
            "0",
            "--set",
            "backend.kind=torch",
            "--threads",
            str(threads),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = process.stdout.readline()
    found = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    if not found:
        process.kill()
        raise SystemExit(f"serve did not start: {line!r} {process.stderr.read()[-2000:]}")
    return process, f"http://127.0.0.1:{found.group(1)}"


async def client(session, url: str, index: int, leave: bool, seen: list) -> str:
    body = {"prompt": list(range(1, 9 + index % 48)), "max_tokens": 32 + index % 64, "stream": True}
    async with session.post(url + "/v1/completions", json=body) as response:
        if response.status != 200:
            return f"http {response.status}"
        async for raw in response.content:
            line = raw.decode().strip()
            if line.startswith("data:") and "choices" in line:
                seen.append(json.loads(line[5:])["id"])
                if leave:
                    return "left"
            if line == "data: [DONE]":
                return "done"
    return "cut"


async def watch(session, url: str, stop: asyncio.Event, log: dict) -> None:
    last_success = 0.0
    while not stop.is_set():
        async with session.get(url + "/health") as health:
            log["health"].append(health.status)
        async with session.get(url + "/metrics") as response:
            text = await response.text()
        success = metric(text, "vllm:request_success_total")
        running = metric(text, "vllm:num_requests_running")
        waiting = metric(text, "vllm:num_requests_waiting")
        received = metric(text, "pagesim:requests_received_total")
        rejected = metric(text, "pagesim:requests_rejected_total")
        if success < last_success or running < 0 or waiting < 0:
            log["bad"].append((success, running, waiting))
        if received != success + rejected + running + waiting:
            log["unbalanced"].append((received, success, rejected, running, waiting))
        last_success = success
        log["scrapes"] += 1
        await asyncio.sleep(0.25)


async def load(url: str, clients: int, leave_share: float) -> dict:
    import aiohttp

    log: dict = {"health": [], "bad": [], "unbalanced": [], "scrapes": 0}
    seen: list[str] = []
    limits = aiohttp.TCPConnector(limit=clients + 4)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=limits, timeout=timeout) as session:
        stop = asyncio.Event()
        watcher = asyncio.create_task(watch(session, url, stop, log))
        every = int(1 / leave_share) if leave_share else 0
        started = time.perf_counter()
        ends = await asyncio.gather(
            *(client(session, url, i, bool(every) and i % every == 0, seen) for i in range(clients))
        )
        log["load_s"] = time.perf_counter() - started
        for _ in range(600):  # the engine finishes what the leavers left behind
            async with session.get(url + "/metrics") as response:
                text = await response.text()
            if metric(text, "vllm:request_success_total") >= clients:
                break
            await asyncio.sleep(0.1)
        stop.set()
        await watcher
        log["final_success"] = metric(text, "vllm:request_success_total")
        log["running_after"] = metric(text, "vllm:num_requests_running")
        log["waiting_after"] = metric(text, "vllm:num_requests_waiting")
    log["ends"] = {kind: ends.count(kind) for kind in sorted(set(ends))}
    log["ids"] = len(set(seen))
    return log


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--leave", type=float, default=0.2, help="share that leaves early")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    process, url = start_server(args.threads)
    try:
        time.sleep(0.5)
        before = rss_mib(process.pid)
        first = asyncio.run(load(url, args.clients, args.leave))  # warms the caches up
        time.sleep(1.0)
        warm = rss_mib(process.pid)
        log = asyncio.run(load(url, args.clients, args.leave))
        log["final_success"] -= args.clients  # the counter is cumulative
        time.sleep(1.0)
        after = rss_mib(process.pid)
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    for key in ("health", "bad", "unbalanced"):
        log[key] += first[key]
    checks = {
        "/health answered 200 at every scrape": log["health"] and set(log["health"]) == {200},
        "metrics never went backwards or negative": not log["bad"],
        "at every scrape received = finished + rejected + running + waiting": not log["unbalanced"],
        "every request finished once in the engine": log["final_success"] == args.clients,
        "nothing left running or waiting": log["running_after"] + log["waiting_after"] == 0,
        "every client's stream had its own id": log["ids"] == args.clients,
        "no traceback on the server's stderr": "Traceback" not in err,
        "memory back to where the first round left it (within 8 MiB)": after - warm <= 8,
    }
    load_avg = os.getloadavg()
    print(
        f"serve under load: {args.clients} streaming clients ({args.leave:.0%} leave after "
        f"their first token), tiny on the CPU, {args.threads} torch thread(s); load average "
        f"{load_avg[0]:.2f}"
    )
    print(
        f"  clients ended: {log['ends']}; load took {log['load_s']:.1f} s; "
        f"{log['scrapes']} scrapes of /health and /metrics"
    )
    print(
        f"  server memory: {before:.0f} MiB idle, {warm:.0f} MiB after a first round, "
        f"{after:.0f} MiB after the second ({after - warm:+.0f} MiB)"
    )
    for name, ok in checks.items():
        print(f"  {'ok  ' if ok else 'FAIL'} {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
