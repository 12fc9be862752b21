"""What sliding windows buy (docs/windows.md): gpt-oss-20b and Gemma 3 12B on one H100 SXM,
each at the same load with its windows on and off (``model.sliding_window: off``: every
layer keeps every token, one KV cache group).

For each model and load it prints the KV a long sequence keeps per token (the layers
that keep every token; the windows add a fixed amount), the pool in blocks and in
tokens of a long sequence, the most sequences running at once, preemptions, TTFT and
TPOT p99 and the verdict; then CPU time and the load average. Asserts nothing.

    .venv/bin/python bench/kv_windows.py
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.cli import main as pagesim  # noqa: E402
from sim.config.loader import load_scenario  # noqa: E402

SCENARIO = "scenarios/windows/gpt-oss-20b.yaml"
#: long reasoning-style outputs: what fills the KV cache (the scenario's own, longer)
LOAD = [
    "simulation.num_requests=1200",
    "workload.input={kind: uniform, min: 2000, max: 8000}",
    "workload.output={kind: uniform, min: 2000, max: 8000}",
]
MODELS = {
    "gpt-oss-20b": "model={config: ../models/gpt-oss-20b.json, max_model_len: 32768}",
    "gemma-3-12b": "model={config: ../models/gemma-3-12b.json, max_model_len: 32768}",
}
RATES = {"gpt-oss-20b": (1.0, 1.5), "gemma-3-12b": (0.25, 0.5)}


def run(sets: list[str]) -> tuple[dict, int]:
    """The run's summary and the most sequences a step ran."""
    with tempfile.TemporaryDirectory() as out:
        # (not --quiet: each run's progress bar and ETA show on stderr)
        args = ["run", str(ROOT / SCENARIO), "--out", out, "--no-report"]
        for assignment in sets:
            args += ["--set", assignment]
        with contextlib.redirect_stdout(io.StringIO()):  # (its "wrote ..." lines)
            code = pagesim(args)
        if code != 0:
            raise SystemExit(f"pagesim run {sets} failed")
        summary = json.loads((Path(out) / "summary.json").read_text())
        lines = (Path(out) / "steps.csv").read_text().splitlines()
        column = lines[0].split(",").index("batch_size")
        most = max(int(line.split(",")[column]) for line in lines[1:])
        return summary, most


def kv_per_token(sets: list[str]) -> tuple[int, int, int]:
    """(KV bytes a token keeps in the layers that keep every token, pool blocks, tokens
    of a long sequence the pool holds: its blocks over the groups that keep every
    token, a window's few blocks aside)."""
    scenario = load_scenario(ROOT / SCENARIO, overrides=sets)
    model, layout = scenario.model, scenario.model.kv_layout
    full_layers = dict(model.attention_kinds()).get(None, 0)
    per_token = model.kv_bytes_per_token(1) // model.num_layers * full_layers
    blocks = scenario.kv_pool.device_blocks
    full_groups = sum(1 for group in layout.groups if group.sliding_window is None)
    return per_token, blocks, blocks // max(full_groups, 1) * scenario.cache.block_size


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # --help
    start = time.process_time()
    print(f"load average (1 min): {os.getloadavg()[0]:.2f}")
    header = (
        f"{'run':30} {'KV/token':>9} {'blocks':>9} {'tokens':>10} {'most':>5} {'preem':>6} "
        f"{'TTFT99':>8} {'TPOT99':>7}  verdict"
    )
    for name, model in MODELS.items():
        print(f"\n{name} on one H100 SXM, {SCENARIO} with {LOAD} (times in ms)\n{header}")
        for rate in RATES[name]:
            for window in ("on", "off"):
                sets = [*LOAD, f"workload.arrival.rate_rps={rate}", model]
                if window == "off":
                    sets[-1] = model.replace("}", ", sliding_window: 'off'}")
                per_token, blocks, tokens = kv_per_token(sets)
                summary, most = run(sets)
                b = summary["benchmark"]
                print(
                    f"{f'{rate} req/s, windows {window}':30} {per_token / 1024:7.0f} K "
                    f"{blocks:>9,} {tokens:>10,} {most:>5} {summary['num_preemptions']:>6} "
                    f"{b['p99_ttft_ms']:>8,.0f} {b['p99_tpot_ms']:>7.1f}  "
                    f"{summary['steady_state']['verdict']}"
                )
    print(f"\nCPU time: {time.process_time() - start:.1f} s")


if __name__ == "__main__":
    main()
