"""Sweeps and capacity searches on Ray: a two-node cluster on loopback (``ray start
--head`` plus a second ``ray start --address`` on this machine, started and stopped
here), and a fresh local Ray. The same sweep gives byte-identical points.csv and run
folders on the local pool and on Ray; a worker killed mid-point is retried and the
sweep completes with every point once.

Kept small (the CI machine has 2 cores): one cluster for the module, tiny scenarios.
"""

from __future__ import annotations

import csv
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")  # a guard only: make test installs the cluster extra

from tests.sim.sweep.test_sweep import files_of, rows, tiny_base  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
RAY = str(Path(sys.executable).with_name("ray"))
TINY = ROOT / "scenarios" / "tiny.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_env(tmp_path_factory):
    """The environment of a two-node loopback cluster's clients (its address in
    ``PAGESIM_TEST_RAY``); both nodes are stopped after the module."""
    temp = tmp_path_factory.mktemp("ray")
    env = {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "token",  # one token for the nodes and the drivers
        "RAY_AUTH_TOKEN": secrets.token_hex(16),
        "PAGESIM_RAY_OBJECT_STORE_MB": "100",
        "PYTHONPATH": str(ROOT),
    }
    port = free_port()
    address = f"127.0.0.1:{port}"
    current = Path.home() / ".ray" / "ray_current_cluster"
    saved = current.read_bytes() if current.exists() else None
    common = [
        "--num-cpus=1",
        "--object-store-memory=100000000",
        "--node-ip-address=127.0.0.1",
        "--disable-usage-stats",
        "--block",
    ]
    head = subprocess.Popen(
        [
            RAY,
            "start",
            "--head",
            f"--port={port}",
            "--include-dashboard=false",
            f"--temp-dir={temp}",
            *common,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    nodes = [head]
    try:
        _wait_for(lambda: _connects("127.0.0.1", port), "the head node", head)
        nodes.append(
            subprocess.Popen(
                [RAY, "start", f"--address={address}", *common],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        _wait_for(lambda: _cpus(address, env) == 2, "the second node", nodes[1])
        yield {**env, "PAGESIM_TEST_RAY": address}
    finally:
        for node in reversed(nodes):  # `ray start --block` stops its processes on SIGTERM
            node.send_signal(signal.SIGTERM)
        for node in nodes:
            try:
                node.wait(timeout=30)
            except subprocess.TimeoutExpired:
                node.kill()
        if saved is None:
            current.unlink(missing_ok=True)
        else:
            current.write_bytes(saved)


def _connects(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _cpus(address: str, env) -> int:
    code = (
        f"import ray; ray.init(address={address!r}, logging_level='ERROR'); "
        "print(int(ray.cluster_resources().get('CPU', 0)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    return int(done.stdout.strip() or 0)


def _wait_for(check, what: str, process, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        if check():
            return
        time.sleep(0.5)
    raise RuntimeError(f"{what} did not come up in {timeout:.0f} s")


def pagesim(args, env, code=0, timeout=180) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "sim.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == code, done.stderr[-3000:]
    return done


def test_local_pool_and_a_two_node_ray_cluster_write_the_same_bytes(ray_env, tmp_path):
    base = tiny_base(tmp_path / "sc", plugin=True)  # a plug-in file that must travel
    args = [
        "sweep",
        str(base),
        "--grid",
        "cache.block_size=8,16",
        "--grid",
        "scheduler.params.fail_after=-1,5",
        "--seeds",
        "2",
        "--quiet",
    ]
    # half the points fail on purpose (exit 1): failures must match too
    pagesim([*args, "--out", str(tmp_path / "local"), "--jobs", "2"], ray_env, code=1)
    pagesim(
        [*args, "--out", str(tmp_path / "ray"), "--ray", ray_env["PAGESIM_TEST_RAY"]],
        ray_env,
        code=1,
    )
    local, ray = files_of(tmp_path / "local"), files_of(tmp_path / "ray")
    assert '"executor": "Ray (127.0.0.1:' in ray.pop("sweep.json").decode()
    local.pop("sweep.json")
    assert local == ray
    statuses = [r["status"] for r in rows(tmp_path / "ray")]
    assert statuses.count("ok") == 4 and statuses.count("failed") == 4


def test_a_worker_killed_mid_point_is_retried_and_no_point_is_lost_or_doubled(ray_env, tmp_path):
    base = tiny_base(tmp_path, requests=2000)  # seconds a point: time to kill one
    args = ["sweep", str(base), "--grid", "cache.block_size=8,16", "--quiet"]
    killed: list[int] = []
    stop = threading.Event()

    def kill_one_running_point() -> None:
        while not stop.is_set() and not killed:
            for pid in _task_processes():
                time.sleep(0.5)  # well into the point
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    continue
                return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_one_running_point)
    killer.start()
    try:
        pagesim(
            [*args, "--out", str(tmp_path / "ray"), "--ray", ray_env["PAGESIM_TEST_RAY"]], ray_env
        )
    finally:
        stop.set()
        killer.join()
    assert killed, "no Ray worker was found running a point"
    table = rows(tmp_path / "ray")
    assert [(r["cache.block_size"], r["status"]) for r in table] == [("8", "ok"), ("16", "ok")]
    assert len(list((tmp_path / "ray" / "runs").iterdir())) == 2
    pagesim([*args, "--out", str(tmp_path / "local"), "--jobs", "2"], ray_env)
    assert (tmp_path / "ray" / "points.csv").read_bytes() == (
        tmp_path / "local" / "points.csv"
    ).read_bytes()


def _task_processes() -> list[int]:
    """Ray workers running a point now (Ray titles them ``ray::run_point``)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            title = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if title.startswith(b"ray::run_point"):
            found.append(int(entry))
    return found


def test_capacity_on_a_fresh_local_ray_matches_the_local_pool(ray_env, tmp_path):
    env = {k: v for k, v in ray_env.items() if k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_MODE")}
    args = [
        "capacity",
        str(TINY),
        "--set",
        "simulation.num_requests=150",
        "--slo",
        "ttft.p99=20ms",
        "--tolerance",
        "0.2",
        "--jobs",
        "2",
        "--quiet",
    ]
    pagesim([*args, "--out", str(tmp_path / "local")], env)
    pagesim([*args, "--out", str(tmp_path / "ray"), "--ray"], env)
    with open(tmp_path / "ray" / "capacity.csv", newline="") as f:
        (config,) = list(csv.DictReader(f))
    assert config["status"] == "converged" and float(config["capacity_rps"]) > 0
    for name in ("capacity.csv", "probes.csv"):
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()
