"""pagesim's ``vllm-v1`` profile against every recorded vLLM version, and its speed
beside the real scheduler's.

For each version under tests/parity/ and each stream: the steps the real scheduler
took, how many pagesim reproduces before the first difference (and what it is), and
the CPU each spends per step. pagesim's CPU is the whole simulation of the stream
(``replay(notes=False)``: engine, allocator, policies, SimPy), median of
``--repeats``; vLLM's is ``schedule()`` + ``update_from_output()`` only, as the
recorder measured it. With ``--vllm-python`` the recorder runs again here, in the same
invocation, for the pinned version (side by side, same machine and load); otherwise
the figure recorded in the file is used and marked so. Prints the 1-minute load
average. Asserts nothing.

    .venv/bin/python bench/parity/compare.py
    .venv/bin/python bench/parity/compare.py --vllm-python /tmp/pagesim-vllm-0.33.0/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from policies.vllm_v1 import VLLM_VERSION  # noqa: E402
from sim.recorded.parity import compare, read_record, replay  # noqa: E402


def pagesim_cpu_per_step(record: dict, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.process_time()
        replay(record, notes=False)
        times.append(time.process_time() - start)
    return statistics.median(times) / max(1, len(record["steps"]))


def fresh_vllm_cpu(python: str, version: str, streams: list[str]) -> dict[str, float]:
    """vLLM's scheduler CPU per step, recorded again now (stream -> seconds)."""
    with tempfile.TemporaryDirectory() as out:
        env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu"}
        subprocess.run(
            [
                python,
                str(ROOT / "bench/parity/record.py"),
                "--vllm-version",
                version,
                "--out",
                out,
                "--streams",
                ",".join(streams),
            ],
            check=True,
            env=env,
            capture_output=True,
        )
        cpu = {}
        for path in Path(out).glob("*.json"):
            block = json.loads(path.read_text())["cpu"]
            cpu[path.stem] = block["scheduler_cpu_s"] / max(1, block["steps"])
        return cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-python", help="the vLLM venv's python, to time vLLM now")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    versions = sorted(p.name for p in (ROOT / "tests/parity").glob("vllm-*") if p.is_dir())
    print(f"load average (1 min): {os.getloadavg()[0]:.2f}")
    for folder in versions:
        version = folder.removeprefix("vllm-")
        paths = sorted((ROOT / "tests/parity" / folder).glob("*.json"))
        pinned = version == VLLM_VERSION
        fresh = {}
        if pinned and args.vllm_python:
            fresh = fresh_vllm_cpu(args.vllm_python, version, [p.stem for p in paths])
        print(f"\nvLLM {version}" + (" (pinned)" if pinned else ""))
        header = f"{'stream':28} {'steps':>6} {'identical':>9}"
        if pinned:
            header += f" {'pagesim us/step':>15} {'vllm us/step':>13} {'ratio':>6}"
        print(header + "  first difference")
        total = same = 0
        ratios = []
        for path in paths:
            record = read_record(path)
            parity = compare(record, replay(record))
            total, same = total + parity.steps, same + parity.identical
            line = f"{path.stem:28} {parity.steps:6d} {parity.identical:9d}"
            if pinned:
                ours = pagesim_cpu_per_step(record, args.repeats)
                block = record["cpu"]
                theirs = fresh.get(path.stem, block["scheduler_cpu_s"] / max(1, block["steps"]))
                mark = "" if path.stem in fresh else "*"
                ratios.append(theirs / ours)
                line += f" {ours * 1e6:15.1f} {theirs * 1e6:12.1f}{mark:1} {theirs / ours:6.2f}"
            difference = parity.first_difference or "-"
            print(f"{line}  {difference[:90]}")
        print(f"{len(paths)} streams, {total} steps, {same} identical ({same / total:.1%})")
        if ratios:
            median = statistics.median(ratios)
            print(
                f"vLLM's scheduler CPU / pagesim's per step: median {median:.2f}x, "
                f"min {min(ratios):.2f}x" + ("" if fresh else "  (* as recorded in the file)")
            )


if __name__ == "__main__":
    main()
