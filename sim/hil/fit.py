"""Fitting the calibrated cost model to a profile: non-negative least squares on relative
residuals, with the error on held-out shapes (see :mod:`sim.costs.calibrated` for the
model and why each choice).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from sim.costs.calibrated import _N, FEATURES, Calibration, CalibrationError


def nnls(a: np.ndarray, b: np.ndarray, *, max_iter: int | None = None) -> np.ndarray:
    """``argmin ||a x - b||_2`` subject to ``x >= 0`` (Lawson and Hanson's active set).

    Columns are scaled to unit norm first so tolerances mean the same for features of
    very different magnitudes; an all-zero column gets coefficient 0. Mutates nothing.
    Raises ValueError on mismatched shapes or non-finite input."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or b.shape != (a.shape[0],):
        raise ValueError(f"nnls needs a[m, n] and b[m], got {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("nnls input must be finite")
    norms = np.linalg.norm(a, axis=0)
    used = norms > 0
    scaled = a[:, used] / norms[used]
    x_used = _active_set(scaled, b, max_iter or 3 * scaled.shape[1] + 10)
    x = np.zeros(a.shape[1])
    x[used] = x_used / norms[used]
    return x


def _active_set(a: np.ndarray, b: np.ndarray, max_iter: int) -> np.ndarray:
    n = a.shape[1]
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    tol = 10 * np.finfo(np.float64).eps * max(a.shape) * max(np.linalg.norm(b), 1e-300)
    for _ in range(max_iter):
        gradient = a.T @ (b - a @ x)
        candidates = ~passive & (gradient > tol)
        if not candidates.any():
            break
        passive[np.argmax(np.where(candidates, gradient, -np.inf))] = True
        for _ in range(n + 1):  # step back until the passive solution is feasible
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            blocking = passive & (z <= 0)
            alpha = np.min(x[blocking] / (x[blocking] - z[blocking]))
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
    return x


def error_stats(predicted: np.ndarray, measured: np.ndarray) -> dict[str, float | None]:
    """MAPE, p50/p90 absolute percentage error (fractions, 0.05 = 5 %) and the signed
    mean relative error of predictions against positive measurements; None when empty."""
    predicted = np.asarray(predicted, dtype=np.float64)
    measured = np.asarray(measured, dtype=np.float64)
    if measured.size == 0:
        return {"mape": None, "p50_ape": None, "p90_ape": None, "mean_rel_error": None, "n": 0}
    relative = (predicted - measured) / measured
    ape = np.abs(relative)
    return {
        "mape": float(ape.mean()),
        "p50_ape": float(np.percentile(ape, 50)),
        "p90_ape": float(np.percentile(ape, 90)),
        "mean_rel_error": float(relative.mean()),
        "n": int(measured.size),
    }


def _fit_relative(features: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    weights = 1.0 / seconds
    return nnls(features * weights[:, None], np.ones_like(seconds))


def fit(
    features: np.ndarray, seconds: np.ndarray, *, profile: Mapping[str, Any] | None = None
) -> Calibration:
    """Fit the coefficients to measured step times (module docstring: relative NNLS,
    held-out error on every fifth row, shipped coefficients refitted on all rows).

    Raises CalibrationError if there are fewer rows than features or a time is not a
    positive finite number. Mutates nothing."""
    features = np.asarray(features, dtype=np.float64)
    seconds = np.asarray(seconds, dtype=np.float64)
    if features.ndim != 2 or features.shape[1] != _N or seconds.shape != (features.shape[0],):
        raise CalibrationError(
            f"expected features [rows, {_N}] and one time per row, "
            f"got {features.shape} and {seconds.shape}"
        )
    if not (np.isfinite(seconds).all() and (seconds > 0).all()):
        raise CalibrationError("every measured time must be a positive finite number")
    rows = features.shape[0]
    if rows < _N:
        raise CalibrationError(f"need at least {_N} profiled shapes to fit, got {rows}")
    heldout = np.arange(rows) % 5 == 4  # rows >= _N, so some are held out, most kept
    train = ~heldout
    quality: dict[str, Any] = {"rows": rows, "method": "nnls on relative residuals"}
    partial = _fit_relative(features[train], seconds[train])
    held = error_stats(features[heldout] @ partial, seconds[heldout])
    quality.update(heldout_rows=int(heldout.sum()), train_rows=int(train.sum()))
    quality.update(heldout_mape=held["mape"], heldout_p90_ape=held["p90_ape"])
    coefficients = _fit_relative(features, seconds)
    in_sample = error_stats(features @ coefficients, seconds)
    quality.update(all_rows_mape=in_sample["mape"], all_rows_p90_ape=in_sample["p90_ape"])
    return Calibration(dict(zip(FEATURES, map(float, coefficients))), quality, dict(profile or {}))
