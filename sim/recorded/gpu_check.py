"""Which GPU a recording's decode speed fits, for a run that names none.

Many recordings do not say which GPU served them, and the user's ``--hardware`` is then
a guess. The recording holds the evidence: each request's decode interval (its first
token to its end) and output length give its time per output token, the other requests
decoding at the same moment give the batch it decoded in, and the prompts whose first
token came during its decode give the prompt tokens its steps carried (their rate over
the interval, times its step time: a busy engine's steps mix prefill chunks into the
decodes). For every GPU preset the analytic cost model prices such a step (each decoding
sequence at its prompt plus half its output, the prompt tokens as one chunk), and the
preset whose median ratio of predicted to recorded step time is nearest 1 is the one
the recording fits. The check says which preset fits and by how much; it changes
nothing.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any

import numpy as np

from sim.recorded.run import RecordedRequests

#: Requests the check samples (evenly over the run): enough for a stable median.
SAMPLE = 200


@dataclasses.dataclass(frozen=True)
class Fit:
    """A preset and its median predicted / recorded decode step time, less 1."""

    hardware: str
    error: float


def decode_samples(requests: RecordedRequests) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """(recorded time per output token, the contexts decoding with it, the prompt tokens
    a step of its carried) for up to :data:`SAMPLE` finished requests of two tokens or
    more."""
    first, end, out = requests.first_token_s, requests.end_s, requests.output_tokens
    ok = np.flatnonzero(np.isfinite(first) & np.isfinite(end) & (out >= 2) & (end > first))
    if ok.size == 0:
        return np.zeros(0), [], np.zeros(0)
    picked = ok[np.linspace(0, ok.size - 1, min(SAMPLE, ok.size)).astype(int)]
    middle = (first + end) / 2
    decoding = np.isfinite(first) & np.isfinite(end)
    context = requests.prompt_tokens + requests.output_tokens // 2
    tpot = (end[picked] - first[picked]) / (out[picked] - 1)
    batches, prompts = [], []
    for k, i in enumerate(picked.tolist()):
        inside = decoding & (first <= middle[i]) & (middle[i] < end)
        batches.append(np.maximum(context[inside], 1).astype(np.int64))
        started = np.isfinite(first) & (first >= first[i]) & (first < end[i])
        rate = requests.prompt_tokens[started].sum() / (end[i] - first[i])
        prompts.append(rate * tpot[k])
    return tpot, batches, np.asarray(prompts)


def fits(raw: dict[str, Any], requests: RecordedRequests, base_dir) -> tuple[list[Fit], int]:
    """Every preset the replay's model fits on, nearest first (module doc), and how many
    requests were sampled; ``raw`` is the replay's scenario mapping."""
    from sim.catalog.presets import HARDWARE_PRESETS
    from sim.config.errors import ScenarioError
    from sim.config.loader import validate_scenario
    from sim.run.build import analytic_executor

    tpot, batches, prompts = decode_samples(requests)
    if tpot.size == 0:
        return [], 0
    out = []
    for name in sorted(HARDWARE_PRESETS):
        try:
            scenario = validate_scenario({**raw, "hardware": name}, base_dir=base_dir)
        except ScenarioError:
            continue  # the model does not fit that card
        executor = analytic_executor(scenario)
        predicted = np.asarray(
            [
                executor.predict([(0, round(n))] if n >= 1 else [], batch)
                for batch, n in zip(batches, prompts.tolist(), strict=True)
            ]
        )
        out.append(Fit(name, statistics.median((predicted / tpot).tolist()) - 1))
    return sorted(out, key=lambda fit: abs(fit.error)), int(tpot.size)


def note(guess: str, ranked: list[Fit], count: int) -> str:
    """The check's note: how the guessed preset fits, and the nearest ones (``count``:
    the requests sampled)."""
    if not ranked:
        return f"GPU: the recording names none; --hardware {guess} not checked (no decode data)"
    mine = next((fit for fit in ranked if fit.hardware == guess), None)
    said = (
        f"--hardware {guess} prices its decode steps {_pct(mine.error)}"
        if mine
        else f"--hardware {guess} was not priced (the model does not fit it)"
    )
    nearest = ", ".join(f"{fit.hardware} {_pct(fit.error)}" for fit in ranked[:3])
    return (
        f"GPU: the recording names none; {said} (median over {count} requests' steps); "
        f"nearest presets: {nearest}"
    )


def _pct(error: float) -> str:
    """-0.04 -> "4 % fast" (predicted shorter than recorded)."""
    return f"{abs(100 * error):.0f} % {'fast' if error < 0 else 'slow'}"
