"""``pagesim serve`` holds a bounded load on loopback (bench/serve_load.py, 40 clients
here, 200 in the docs): /health answers throughout, /metrics never goes backwards, every
request finishes once in the engine (clients that leave do not cancel theirs), and a
second round does not grow the server's memory."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.adversarial.cli import ROOT

pytest.importorskip("torch")
pytest.importorskip("aiohttp")


def test_serve_holds_a_load_of_streaming_clients_some_leaving():
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "serve_load.py"), "--clients", "40"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    checks = [line for line in done.stdout.splitlines() if line.startswith(("  ok", "  FAIL"))]
    assert len(checks) == 8 and all(line.startswith("  ok") for line in checks), done.stdout
    assert "'left': 8" in done.stdout  # a fifth of them went away mid-stream
