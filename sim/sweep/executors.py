"""Where points run: a local process pool (the default; no service needed) or Ray tasks
on a cluster. Both run :func:`sim.sweep.task.run_point` on the same payloads and hand
back its results as data, so the files a sweep writes do not depend on the executor.

No scheduler of our own: ``concurrent.futures.ProcessPoolExecutor`` locally, Ray tasks
with ``max_retries`` (a worker lost mid-point is retried by Ray, and the point comes
back once) for ``--ray``. Ray is imported only here, only when asked for.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import socket
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sim.sweep.task import run_point

#: How often Ray runs a point again after losing the worker that ran it.
RAY_MAX_RETRIES = 3

#: Seconds to wait for a cluster's port before calling it unreachable (ray.init itself
#: retries an unreachable address for minutes).
CONNECT_TIMEOUT_S = 3.0


class ExecutorError(Exception):
    """The executor cannot be used (Ray missing, a cluster unreachable): one line."""


class LocalPool:
    """``jobs`` worker processes on this machine."""

    def __init__(self, jobs: int):
        self.workers = jobs
        self._pool: ProcessPoolExecutor | None = None

    def describe(self) -> str:
        return f"local process pool, {self.workers} workers"

    def __enter__(self) -> LocalPool:
        # Workers fork from a fork server started with one BLAS thread, as Ray starts
        # its workers: numpy's BLAS sums in an order that depends on its thread count,
        # and a point must give the same bytes on either executor.
        context = multiprocessing.get_context("forkserver")
        with single_threaded_blas():
            multiprocessing.forkserver.ensure_running()
        self._pool = ProcessPoolExecutor(
            max_workers=self.workers, mp_context=context, initializer=_worker_init
        )
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is None:
            return
        if exc[0] is not None:  # interrupted: stop the points that are running now
            for process in list(getattr(self._pool, "_processes", {}).values()):
                process.terminate()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._pool = None

    def run(self, payloads: Sequence[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """Yield each payload's result as soon as it is done (in no particular order)."""
        assert self._pool is not None, "use the executor as a context manager"
        pending = {self._pool.submit(run_point, p): p["key"] for p in payloads}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                key = pending.pop(future)
                try:
                    yield future.result()
                except Exception as err:  # the worker process died (BrokenProcessPool)
                    yield lost(key, f"the worker process was lost: {err}")


class RayPool:
    """Ray tasks on a cluster: ``address`` None starts a fresh local Ray; ``auto``, a
    ``host:port`` or ``ray://host:port`` joins an existing one."""

    def __init__(self, address: str | None, jobs: int | None = None):
        self.address = address
        self.jobs = jobs
        self.workers = 1
        self._ray = None
        self._task = None

    def describe(self) -> str:
        where = self.address or "a fresh local Ray"
        return f"Ray ({where}), {self.workers} CPUs"

    def __enter__(self) -> RayPool:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        try:
            import ray
        except ImportError:
            raise ExecutorError(
                "--ray needs ray, which is not installed: pip install -e '.[cluster]' "
                "(or make test, which installs every extra)"
            ) from None
        if self.address not in (None, "auto"):
            _check_reachable(self.address)
        # The driver's own code travels with the tasks: workers need no pagesim install
        # and run exactly what the driver runs.
        runtime_env = {
            "py_modules": [_package_dir(name) for name in ("sim", "backend", "policies")],
            "excludes": ["__pycache__", "*.pyc"],
            "env_vars": dict(SINGLE_THREADED),  # as the local pool (see LocalPool)
        }
        options: dict[str, Any] = {
            "runtime_env": runtime_env,
            "log_to_driver": False,  # our progress owns stderr; results come back as data
            "logging_level": logging.WARNING,
        }
        if self.address is None:
            # A fresh single-machine Ray: "local" (not None, which would join a cluster
            # that `ray start` left on this machine), bound to loopback, no dashboard,
            # a small object store (results are a few MB each; more spills to disk).
            store_mb = int(os.environ.get("PAGESIM_RAY_OBJECT_STORE_MB", "512"))
            options.update(
                address="local",
                _node_ip_address="127.0.0.1",
                include_dashboard=False,
                num_cpus=self.jobs,
                object_store_memory=store_mb << 20,
            )
        else:
            options["address"] = self.address
        try:
            ray.init(**options)
        except Exception as err:
            raise ExecutorError(
                f"--ray {self.address or ''}: cannot start or join Ray: {_first_line(err)}"
            ) from None
        self._ray = ray
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._task = ray.remote(num_cpus=1, max_retries=RAY_MAX_RETRIES)(run_point)
        return self

    def __exit__(self, *exc) -> None:
        if self._ray is not None:
            self._ray.shutdown()
            self._ray = None

    def run(self, payloads: Sequence[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        ray = self._ray
        assert ray is not None, "use the executor as a context manager"
        pending = {self._task.remote(p): p["key"] for p in payloads}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    key = pending.pop(ref)
                    try:
                        yield ray.get(ref)
                    except Exception as err:  # retries exhausted, or the task cancelled
                        yield lost(key, f"the Ray task failed: {_first_line(err)}")
        finally:
            for ref in pending:  # an interrupted sweep leaves nothing running
                ray.cancel(ref, force=True)


#: The environment that gives numpy's BLAS one thread (OpenBLAS reads the first).
SINGLE_THREADED = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@contextlib.contextmanager
def single_threaded_blas():
    """Set :data:`SINGLE_THREADED` for processes started inside; restore after."""
    saved = {name: os.environ.get(name) for name in SINGLE_THREADED}
    os.environ.update(SINGLE_THREADED)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _worker_init() -> None:
    # Ctrl-C reaches the whole process group: the driver handles it (and stops us).
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def lost(key: str, error: str) -> dict[str, Any]:
    """The result of a point whose worker never answered."""
    return {"key": key, "files": {}, "summary": None, "error": error}


def _check_reachable(address: str) -> None:
    """ExecutorError unless ``host:port`` (or ``ray://host:port``) accepts a connection
    within CONNECT_TIMEOUT_S."""
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host = port = None
    if not host or not port:
        raise ExecutorError(f"--ray {address}: expected auto, HOST:PORT or ray://HOST:PORT")
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise ExecutorError(
            f"--ray {address}: cannot reach a Ray cluster there: {reason}"
        ) from None


def _package_dir(name: str) -> str:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None, f"{name} is not importable"
    return str(Path(spec.origin).parent)


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def make_executor(jobs: int | None, ray: str | None):
    """The executor the command line asks for: ``--ray [ADDRESS]`` (``local``: a fresh
    local Ray) or ``--jobs N``."""
    if ray is not None:
        return RayPool(None if ray == "local" else ray, jobs)
    return LocalPool(jobs or os.cpu_count() or 1)
