"""The runs whose outputs are pinned byte for byte (tests/test_golden.py): every shipped
scenario, cut to a few hundred requests, plus the batching modes and allocators on the
tiny scenario. The digests live in outputs.json, and those of every shipped scenario's
scenario.json (the validated scenario as a run records it) in scenario_json.json; refresh
both with

    .venv/bin/python tests/golden/regenerate.py

only in a commit that means to change outputs, and say why in its message."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(
    str(p.relative_to(ROOT))
    for p in (ROOT / "scenarios").rglob("*.yaml")
    if p.parent.name != "sweeps"  # sweep files (pagesim sweep), not scenarios
)
FILES = ("requests.csv", "steps.csv", "summary.json")
SHORT = ["simulation.num_requests=300", "simulation.warmup_requests=20", "backend.kind=model"]
EXTRA = {
    f"tiny+{name}": ("scenarios/tiny.yaml", [f"scheduler.batching={name}"])
    for name in ("prefill-first", "decode-first", "static")
}
EXTRA["tiny+swap"] = (
    "scenarios/tiny.yaml",
    ["preemption.mode=swap", "cache.num_blocks=24", "cache.num_cpu_blocks=64"],
)
EXTRA["tiny+contiguous"] = ("scenarios/tiny.yaml", ["cache.allocator=contiguous-pow2"])


def cases() -> dict[str, tuple[str, list[str]]]:
    """name -> (scenario file relative to the repository, --set overrides)."""
    runs = {path: (path, list(SHORT)) for path in SCENARIOS}
    runs.update({name: (path, SHORT + sets) for name, (path, sets) in EXTRA.items()})
    return runs


def digests(scenario: str, overrides: list[str], options: tuple[str, ...] = ()) -> dict[str, str]:
    """sha256 of each output file of one run through the CLI (with ``options`` of
    ``pagesim run``)."""
    from sim.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        args = ["run", str(ROOT / scenario), "--out", str(out), "--quiet", "--no-report"]
        args += options
        for assignment in overrides:
            args += ["--set", assignment]
        code = main(args)
        if code != 0:
            raise RuntimeError(f"pagesim run {scenario} exited {code}")
        return {name: hashlib.sha256((out / name).read_bytes()).hexdigest() for name in FILES}


def scenario_dump(path: str) -> str:
    """What ``pagesim run`` writes as scenario.json for a shipped scenario (no overrides)."""
    import json

    from sim.config.loader import load_scenario

    scenario = load_scenario(ROOT / path)
    return json.dumps(scenario.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def scenario_dump_digests() -> dict[str, str]:
    """sha256 of every shipped scenario's scenario.json, by scenario file."""
    return {path: hashlib.sha256(scenario_dump(path).encode()).hexdigest() for path in SCENARIOS}
