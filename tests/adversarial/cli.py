"""Running the real ``pagesim`` command in a subprocess, for the adversarial tests.

Every test in tests/adversarial/ feeds the command line something hostile and checks the
same promise (README, "Bad input"): exit code 2, no traceback, one line on stderr that
names the culprit, and nothing written. This module is what those tests share:

* :func:`run_cli` runs ``python -m sim.cli ARGS`` from the repository root (this
  checkout's code, whatever ``pagesim`` script is installed) and returns a
  :class:`CliResult`;
* :func:`snapshot` records every file and folder under some paths (size, modification
  time and a hash of the content), so a test can assert that a failed command created,
  changed or removed nothing there (``snapshot(tmp) == before``);
* :func:`one_line_error` is the assertion: it returns what is wrong with a result (an
  empty string when it is the expected one-line error naming every culprit), so a
  table-driven test can collect every case's problem and report them all at once;
* :func:`run_all` runs a list of argument lists concurrently (a few workers: each run is
  mostly interpreter start-up, so a 2-core machine still gains) and returns the results
  in order;
* :func:`run_cases` builds a table of cases, each in a folder of its own, runs them all
  with :func:`run_all` and returns each case's result, culprits and the folder's
  snapshots before and after;
* :data:`TINY_SCENARIO` is a small, sound scenario the cases break one part of, and
  :func:`replace_file` swaps a file for hostile content (or a folder).

A typical use::

    before = snapshot(tmp_path)
    result = run_cli(["run", str(scenario), "--out", str(tmp_path / "out")])
    assert one_line_error(result, "scenario.yaml", "cache.block_size") == ""
    assert snapshot(tmp_path) == before
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: The exit code of a user mistake (sim.cli.common.USER_ERROR).
USER_ERROR = 2

#: Seconds one command may take before it counts as a hang (and is killed).
TIMEOUT_S = 60.0

#: CliResult.returncode of a command killed at its timeout.
TIMED_OUT = -9

#: A small scenario on the tiny model that runs in well under a second; cases copy it
#: and break one part.
TINY_SCENARIO = {
    "model": "tiny",
    "hardware": "h100-sxm",
    "cache": {"block_size": 16, "num_blocks": 128},
    "scheduler": {"max_num_seqs": 16, "max_num_batched_tokens": 512},
    "workload": {
        "arrival": {"kind": "poisson", "rate_rps": 50},
        "input": {"kind": "uniform", "min": 8, "max": 96},
        "output": {"kind": "uniform", "min": 4, "max": 48},
    },
    "simulation": {"num_requests": 20},
}

#: A case's builder: given an empty folder, it writes the inputs there and returns the
#: command's arguments and the culprits its error line must name.
Build = Callable[[Path], tuple[list[str], list[str]]]


@dataclass(frozen=True)
class CliResult:
    """One finished ``pagesim`` command: its arguments, exit code and output."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        """The command and what it printed, for an assertion message."""
        return (
            f"pagesim {' '.join(self.args)}\n  exit {self.returncode}\n"
            f"  stderr: {self.stderr.strip()[-2000:]!r}\n  stdout: {self.stdout.strip()[-500:]!r}"
        )


def run_cli(
    args: Sequence[str], *, cwd: Path = ROOT, timeout: float = TIMEOUT_S, env=None
) -> CliResult:
    """Run ``python -m sim.cli *args`` in ``cwd`` (default: the repository root). A
    command that runs past ``timeout`` seconds is killed; its result has returncode
    :data:`TIMED_OUT`."""
    environment = dict(os.environ if env is None else env)
    # this checkout's sim package, whatever cwd is and whatever pagesim is installed
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [environment.get("PYTHONPATH")])]
    )
    try:
        done = subprocess.run(
            [sys.executable, "-m", "sim.cli", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=environment,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:  # a hang: reported as the case's failure
        return CliResult(tuple(args), TIMED_OUT, "", f"(killed: no answer in {timeout:.0f} s)")
    return CliResult(tuple(args), done.returncode, done.stdout, done.stderr)


def run_all(arg_lists: Iterable[Sequence[str]], *, workers: int = 3) -> list[CliResult]:
    """:func:`run_cli` of each argument list, ``workers`` at a time, in input order."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(run_cli, arg_lists))


@dataclass(frozen=True)
class CaseOutcome:
    """One case run by :func:`run_cases`: its result, the culprits its error line must
    name, and its folder's snapshot before and after the command."""

    result: CliResult
    culprits: tuple[str, ...]
    before: dict[str, tuple]
    after: dict[str, tuple]


def run_cases(builds: dict[str, Build], new_folder: Callable[[], Path]) -> dict[str, CaseOutcome]:
    """Each case built in a fresh folder from ``new_folder()`` (say, a
    ``tmp_path_factory.mktemp``), then all run at once with :func:`run_all`."""
    built = {}
    for name, build in builds.items():
        folder = new_folder()
        argv, culprits = build(folder)
        built[name] = (folder, argv, tuple(culprits), snapshot(folder))
    done = run_all([argv for _, argv, _, _ in built.values()])
    return {
        name: CaseOutcome(result, culprits, before, snapshot(folder))
        for (name, (folder, _, culprits, before)), result in zip(built.items(), done, strict=True)
    }


def replace_file(path: Path, content: str | bytes | None) -> None:
    """``path`` (an existing file) replaced by ``content``; None: by an empty folder."""
    path.unlink()
    if content is None:
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)


def snapshot(*roots: Path) -> dict[str, tuple]:
    """Every path under ``roots`` (the roots included) with what it is: a folder, or a
    file's size, modification time and content hash. Equal snapshots: nothing was
    created, changed or removed."""
    seen: dict[str, tuple] = {}
    for root in roots:
        paths = [root, *root.rglob("*")] if root.is_dir() else [root]
        for path in paths:
            if path.is_symlink():
                seen[str(path)] = ("link", os.readlink(path))
            elif path.is_dir():
                seen[str(path)] = ("folder",)
            elif path.exists() and not path.is_file():  # a FIFO, a socket: never read
                seen[str(path)] = ("special", path.stat().st_mtime_ns)
            elif path.exists():
                stat = path.stat()
                # a case's multi-gigabyte (sparse) input: its size and time say enough
                big = stat.st_size > 64 << 20
                digest = "" if big else hashlib.sha256(path.read_bytes()).hexdigest()
                seen[str(path)] = ("file", stat.st_size, stat.st_mtime_ns, digest)
    return seen


def one_line_error(result: CliResult, *culprits: str, code: int = USER_ERROR) -> str:
    """What is wrong with ``result`` as a user-mistake report ('' if nothing): the exit
    code is ``code``, stderr holds no traceback and exactly one line, ``pagesim:
    error: ...`` (or argparse's ``pagesim ...: error: ...``), naming every culprit (a
    file name, a field, an option)."""
    problems = []
    if result.returncode != code:
        problems.append(f"exit code {result.returncode}, expected {code}")
    if "Traceback" in result.stderr:
        problems.append("a traceback")
    lines = result.stderr.strip().splitlines()
    if len(lines) != 1:
        problems.append(f"{len(lines)} lines on stderr, expected 1")
    elif "error:" not in lines[0]:
        problems.append("the line is not an error line")
    missing = [c for c in culprits if c not in result.stderr]
    if missing:
        problems.append(f"stderr does not name {', '.join(map(repr, missing))}")
    if not problems:
        return ""
    return "; ".join(problems) + "\n" + result.describe()
