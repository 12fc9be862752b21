"""Two cost models on the same steps: run a scenario with its own cost model and price
every step it executed with the analytic model too, by step kind.

Run-level figures (TTFT, TPOT) also move because a slower model keeps more requests in
the system; this separates the per-step difference from that feedback.

    .venv/bin/python bench/costmodels_on_run.py SCENARIO [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.config.loader import load_scenario  # noqa: E402
from sim.run.build import analytic_executor, build_executor  # noqa: E402
from sim.run.runner import simulate  # noqa: E402


def step_kind(batch) -> str:
    if not batch.prefills:
        return "decode-only"
    return "prefill-only" if batch.num_decode_tokens == 0 else "mixed"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    scenario = load_scenario(args.scenario, args.overrides)
    analytic = analytic_executor(scenario)
    rows: dict[str, list[tuple[float, float]]] = defaultdict(list)

    class Both:
        def __init__(self, inner):
            self.inner = inner

        def execute(self, batch) -> float:
            seconds = self.inner.execute(batch)
            if batch.batch_size:
                rows[step_kind(batch)].append((seconds, analytic.execute(batch)))
            return seconds

    simulate(scenario, executor_factory=lambda s, a: Both(build_executor(s, a)))
    print(
        f"{args.scenario} with cost_model.kind={scenario.cost_model.kind}, every step also "
        f"priced by the analytic model"
    )
    print(f"{'step kind':<14}{'steps':>8}{'own ms':>10}{'analytic ms':>13}{'analytic/own':>14}")
    for kind, pairs in sorted(rows.items()):
        own, other = np.array(pairs).T
        print(
            f"{kind:<14}{own.size:>8}{own.mean() * 1e3:>10.2f}{other.mean() * 1e3:>13.2f}"
            f"{(other / own).mean():>14.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
