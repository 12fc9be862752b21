"""Rewrite tests/golden/outputs.json and scenario_json.json from the code as it is (see
cases.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from tests.golden.cases import cases, digests, scenario_dump_digests  # noqa: E402

if __name__ == "__main__":
    table = {name: digests(path, sets) for name, (path, sets) in sorted(cases().items())}
    (HERE / "outputs.json").write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(table)} runs to {HERE / 'outputs.json'}")
    dumps = scenario_dump_digests()
    (HERE / "scenario_json.json").write_text(json.dumps(dumps, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(dumps)} scenario dumps to {HERE / 'scenario_json.json'}")
