"""x
"""

from __future__ import annotations

from typing import Protocol

from backend.step import Batch


class Executor(Protocol):
    """Runs (or predicts) one engine step. The SimPy clock advances by the result.

    Implemented by the analytic cost model, the calibrated cost model and the real
    torch/Triton backend."""

    def execute(self, batch: Batch) -> float:
        """Seconds the step takes (predicted or measured)."""
        ...
