"""What a replica runs its steps on (a cost model or the real backend) and where the
tokens it feeds back come from.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from backend.step import Batch
from sim.workload.request import Request


class Executor(Protocol):
    """Runs (or predicts) one engine step. The SimPy clock advances by the result.

    Implemented by the analytic cost model, the calibrated cost model and the real
    torch/Triton backend."""

    def execute(self, batch: Batch) -> float:
        """Seconds the step takes (predicted or measured)."""
        ...


@runtime_checkable
class PricesDecodeStretches(Protocol):
    """An executor that prices a decode stretch in one call (sim/engine/fast_forward.py)."""

    def decode_steps(self, context_lens: np.ndarray, steps: int) -> np.ndarray:
        """Seconds of each of ``steps`` decode-only steps of one batch whose context
        lengths are ``context_lens`` at the first and grow by one a step."""
        ...


@runtime_checkable
class CountsStretchSteps(Protocol):
    """A stretch-pricing executor that keeps statistics of the steps it prices (the
    profile model's steps outside its grid): a stretch is priced whole but may be cut,
    so only the steps that ran are counted, when the engine says how many did."""

    def stretch_ran(self, steps: int) -> None:
        """The first ``steps`` steps of the latest ``decode_steps`` call ran."""
        ...


@runtime_checkable
class DeclaresTokenReads(Protocol):
    """An allocator or executor that declares whether it reads the token ids it is given:
    decode token ids are drawn only where one does (drawing them costs time). One that
    declares nothing is taken to read them."""

    reads_token_ids: bool


def reads_token_ids(part: object) -> bool:
    """Whether ``part`` (an allocator or an executor) reads token ids."""
    return part.reads_token_ids if isinstance(part, DeclaresTokenReads) else True


class TokenSource(Protocol):
    """What each sequence generates (the engine feeds these tokens back as decode
    inputs, so prefix caching and multi-turn sessions see them)."""

    def stream_state(self, req_id: int, sample: int) -> int:
        """An int64 key for sample ``sample`` of request ``req_id``, computed once."""
        ...

    def tokens(self, states: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """int32 token ids: the ``positions[i]``-th output token of ``states[i]``."""
        ...

    def decode_inputs(self, states: np.ndarray, generated: np.ndarray) -> np.ndarray:
        """What each decoding sequence feeds to the step: its newest sampled token
        (``tokens(states, generated - 1)``), int32."""
        ...

    def prompt(self, request: Request) -> np.ndarray:
        """The prompt token ids the engine feeds the allocator and executor for
        ``request`` (held while it is in flight, then dropped)."""
        ...
