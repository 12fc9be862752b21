"""Regenerate the two SYNTHETIC sample traces in this folder (deterministic, seed 7).

They follow the published column layouts of the Azure LLM inference trace (CSV:
TIMESTAMP, ContextTokens, GeneratedTokens) and the Mooncake trace (JSONL: timestamp in
ms, input_length, output_length, hash_ids of 512-token blocks), but every value is made
up here: they are not samples of the real traces.

    .venv/bin/python scenarios/traces/make_samples.py
"""

import json
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
ROWS = 300
AZURE_ROWS = 800  # at 2x speed, enough for a steady window (scenarios/trace-azure.yaml)


def azure(rng: np.random.Generator) -> None:
    start = datetime(2023, 11, 16, 18, 15, 46)
    gaps = rng.exponential(0.25, AZURE_ROWS)  # ~4 requests/s
    context = np.maximum(rng.lognormal(6.5, 1.0, AZURE_ROWS).astype(int), 1)
    generated = np.maximum(rng.lognormal(5.0, 0.9, AZURE_ROWS).astype(int), 1)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    t = 0.0
    for gap, c, g in zip(gaps, context, generated, strict=True):
        t += gap
        stamp = start + timedelta(seconds=t)
        # the trace's layout: 7 fractional digits
        lines.append(f"{stamp:%Y-%m-%d %H:%M:%S}.{stamp.microsecond:06d}0,{c},{g}")
    (HERE / "azure-sample.csv").write_text("\n".join(lines) + "\n")


def mooncake(rng: np.random.Generator) -> None:
    # 10 shared documents of 2-6 blocks each; most requests start with one of them
    documents = []
    next_id = 0
    for _ in range(10):
        size = int(rng.integers(2, 7))
        documents.append(list(range(next_id, next_id + size)))
        next_id += size
    t_ms = 0
    rows = []
    for _ in range(ROWS):
        t_ms += int(rng.exponential(300))
        own_blocks = int(rng.integers(0, 3))
        ids = list(documents[int(rng.integers(10))]) if rng.random() < 0.8 else []
        ids += list(range(next_id, next_id + own_blocks))
        next_id += own_blocks
        input_length = max(1, len(ids) * 512 - int(rng.integers(0, 512)))
        output_length = int(rng.integers(16, 400))
        rows.append(
            {
                "timestamp": t_ms,
                "input_length": input_length,
                "output_length": output_length,
                "hash_ids": ids,
            }
        )
    text = "\n".join(json.dumps(r) for r in rows)
    (HERE / "mooncake-sample.jsonl").write_text(text + "\n")


if __name__ == "__main__":
    azure(np.random.default_rng(7))
    mooncake(np.random.default_rng(8))
