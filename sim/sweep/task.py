"""One point as a self-contained task: what travels to a worker (the raw scenario, the
files it names, the run folder's metadata) and what comes back (the run folder's files
as bytes, its summary, or the error that stopped it).

Nothing assumes a shared file system: :func:`make_payload` reads every file the
scenario names (traces, length tables, calibration files, profile folders, ``.py``
plug-ins) on the driver, and :func:`run_point` writes them into a private temporary
folder on the worker, laid out so that each path *as written* in the scenario still
resolves (relative paths keep their ``..``; an absolute path is rewritten to a relative
one under ``_inputs/``, the only way the written path changes). The local pool runs the
very same function on the very same payload, so both executors give identical bytes.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from sim.config.errors import ScenarioError
from sim.run.folders import run_metadata

#: A file-backed plug-in name, ``path/to/file.py:attr``.
_PLUGIN = re.compile(r"^(?P<file>.+\.py):(?P<attr>[A-Za-z_][\w.]*)$")

#: Keys whose string value names a file or folder of the scenario's: FileRef fields
#: (``path``, ``file``), ``model.config`` and ``calibration``. A value of one of these
#: keys that names no existing file is left as it is.
_FILE_KEYS = ("path", "file", "config", "calibration")

#: Most bytes of input files one point may carry.
MAX_INPUT_BYTES = 1 << 30

#: How many times a probe that was too short to judge is run again, longer.
MAX_EXTENSIONS = 2

#: A longer probe is at most this many times the scenario's num_requests.
MAX_EXTENSION_FACTOR = 8


def make_payload(point, *, html: bool, extend: bool = False) -> dict[str, Any]:
    """The task for ``point`` (sim.sweep.points.Point). ``extend``: a run whose
    steady-state verdict is "too short" is run again with the requests its verdict
    asks for (capacity probes must reach a steady state to be judged)."""
    raw, files, depth = _ship_inputs(point.raw, point.base_dir, point.source)
    metadata = run_metadata(point.scenario)
    # A run folder must be the same bytes whichever executor made it and whenever: the
    # date and the command of the sweep are in its sweep.json, not in each run.
    del metadata["date_utc"], metadata["command"]
    metadata["made_by"] = "pagesim sweep (date and command: the sweep's sweep.json)"
    return {
        "key": point.key,
        "folder": point.key,
        "raw": raw,
        "source": point.source,
        "files": files,
        "depth": depth,
        "html": html,
        "extend": extend,
        "metadata": metadata,
    }


def _ship_inputs(raw: dict, base_dir: Path, source: str):
    raw = copy.deepcopy(raw)
    files: dict[str, bytes] = {}
    depth = 0

    def ship(text: str) -> str:
        nonlocal depth
        match = _PLUGIN.match(text)
        target = match["file"] if match else text
        path = Path(target)
        resolved = path if path.is_absolute() else (base_dir / path).resolve()
        if not resolved.exists():
            return text  # not a file of ours (a policy parameter, say): nothing to carry
        if path.is_absolute():
            digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:8]
            rel = f"_inputs/{digest}/{resolved.name}"
        else:
            rel = os.path.normpath(target)
        depth = max(depth, sum(part == ".." for part in Path(rel).parts))
        _read_into(files, rel, resolved, source)
        if not path.is_absolute():
            return text
        return f"{rel}:{match['attr']}" if match else rel

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(value, str) and (key in _FILE_KEYS or _PLUGIN.match(value)):
                    node[key] = ship(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                if isinstance(value, str) and _PLUGIN.match(value):
                    node[i] = ship(value)
                else:
                    walk(value)

    walk(raw)
    return raw, files, depth


def _read_into(files: dict[str, bytes], rel: str, resolved: Path, source: str) -> None:
    paths = [resolved] if resolved.is_file() else sorted(resolved.rglob("*"))
    for path in paths:
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        name = rel if path == resolved else os.path.join(rel, str(path.relative_to(resolved)))
        try:
            files[name] = path.read_bytes()
        except OSError as err:
            raise ScenarioError(f"{source}: cannot read {path}: {err.strerror}") from None
    if sum(len(data) for data in files.values()) > MAX_INPUT_BYTES:
        raise ScenarioError(
            f"{source}: the files it names are over {MAX_INPUT_BYTES >> 30} GiB; "
            "too much to send with every point"
        )


def _materialize(tmp: Path, payload: dict[str, Any]) -> Path:
    """Write the payload's files under ``tmp``; return the folder the scenario's relative
    paths resolve against (nested deep enough that ``..`` stays inside ``tmp``)."""
    base = tmp.joinpath("in", *(["d"] * payload["depth"]))
    base.mkdir(parents=True)
    for rel, data in payload["files"].items():
        target = Path(os.path.normpath(base / rel))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return base


def run_point(payload: dict[str, Any]) -> dict[str, Any]:
    """Run one point; never raises for a failed run. Returns ``key``, ``files`` (name
    -> bytes of the run folder), ``summary`` (or None) and ``error`` (or None)."""
    result: dict[str, Any] = {"key": payload["key"], "files": {}, "summary": None, "error": None}
    cpu = time.process_time()
    try:
        with tempfile.TemporaryDirectory(prefix="pagesim-point-") as tmp:
            files, summary = _run(Path(tmp), payload)
        result.update(files=files, summary=summary)
    except Exception as err:  # a failed point records its error; the sweep goes on
        result["error"] = _one_line(err)
    result["cpu_s"] = time.process_time() - cpu  # for the command's own line, not a file
    return result


def _run(tmp: Path, payload: dict[str, Any]):
    from sim.config.loader import validate_scenario
    from sim.output.report import write_report
    from sim.run.runner import simulate, write_run

    base = _materialize(tmp, payload)
    raw = payload["raw"]
    scenario = validate_scenario(raw, payload["source"], base_dir=base)
    result = simulate(scenario)
    limit = MAX_EXTENSION_FACTOR * (scenario.simulation.num_requests or 0)
    for _ in range(MAX_EXTENSIONS if payload["extend"] else 0):
        needed = _requests_needed(result.summary, scenario.simulation.num_requests, limit)
        if needed is None:
            break
        raw = copy.deepcopy(raw)
        raw.setdefault("simulation", {})["num_requests"] = needed
        scenario = validate_scenario(raw, payload["source"], base_dir=base)
        result = simulate(scenario)
    out = tmp / "runs" / payload["folder"]
    write_run(result, scenario, out, html=False)
    (out / "metadata.json").write_text(json.dumps(payload["metadata"], indent=2) + "\n")
    if payload["html"]:
        # The sweep keeps one plotly.min.js at its top, two folders up from each run.
        write_report(
            out,
            result.outcomes,
            result.steps,
            result.summary,
            scenario.name,
            scenario=scenario.model_dump(mode="json"),
            cpu_blocks=scenario.kv_pool.cpu_blocks,
            plotly_js=str(tmp / "plotly.min.js"),
        )
    files = {path.name: path.read_bytes() for path in sorted(out.iterdir()) if path.is_file()}
    return files, result.summary


def _requests_needed(summary, current: int | None, limit: int) -> int | None:
    """More requests for a run too short to judge (a fifth over what its verdict asks
    for, at most ``limit``), or None: judged, not sized by requests, or at the limit."""
    steady = summary.get("steady_state") or {}
    needed = steady.get("requests_needed")
    if steady.get("verdict") != "too short" or not needed or current is None:
        return None
    return min(max(int(needed * 1.2), current + 1), limit) if current < limit else None


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if isinstance(err, ScenarioError) else f"{type(err).__name__}: {text}"
