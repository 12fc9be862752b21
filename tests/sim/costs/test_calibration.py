"""The calibrated cost model: NNLS, the fit, the JSON file and the executor seam."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from backend.step import Batch, PrefillChunk
from backend.transfer import CPU, DEVICE_COPY, GPU, SWAP_IN, SWAP_OUT, Medium, Transfer
from sim.config.errors import ScenarioError
from sim.config.loader import validate_scenario
from sim.costs.calibrated import (
    FEATURES,
    CalibratedCostModel,
    Calibration,
    CalibrationError,
    load,
    model_shape_key,
    save,
    step_features,
)
from sim.hil.fit import error_stats, fit, nnls
from sim.hil.profiling import default_grid
from sim.run.build import build_calibrated_executor

seeds = st.integers(0, 2**32 - 1)


def grid_features() -> np.ndarray:
    return np.array([shape.features() for shape in default_grid()])


def true_coefficients(rng: np.random.Generator) -> np.ndarray:
    """Positive unit costs of realistic magnitude for every column the grid exercises
    (the grid has no block moves, so those two stay 0)."""
    scale = {
        "step": 1e-3,
        "decode_step": 3e-4,
        "tokens": 1e-5,
        "seqs": 1e-5,
        "prefill_chunks": 1e-4,
        "prefill_cached_pairs": 1e-8,
        "prefill_new_pairs": 1e-8,
        "prefill_context": 1e-7,
        "decode_context": 1e-7,
        "decode_padded": 1e-7,
    }
    units = np.array([scale.get(name, 0.0) for name in FEATURES])
    return units * rng.uniform(0.5, 2.0, len(FEATURES))


# -- features ---------------------------------------------------------------------------


def test_step_features_of_a_mixed_step():
    row = dict(zip(FEATURES, step_features([(32, 16)], np.array([10, 20]))))
    assert row["step"] == row["decode_step"] == 1
    assert row["tokens"] == 16 + 2
    assert row["seqs"] == 1 + 2
    assert row["prefill_chunks"] == 1
    assert row["prefill_cached_pairs"] == 16 * 32
    assert row["prefill_new_pairs"] == 16 * 17 / 2
    assert row["prefill_context"] == 32 + 16
    assert row["decode_context"] == 10 + 20
    assert row["decode_padded"] == 2 * 20
    assert row["swapped_blocks"] == row["copied_blocks"] == 0


def test_an_empty_step_has_only_its_moves():
    moved = {SWAP_OUT: 2, SWAP_IN: 1, DEVICE_COPY: 2}
    row = step_features([], np.zeros(0, dtype=np.int64), moved)
    expected = {"swapped_blocks": 3, "copied_blocks": 2}
    assert dict(zip(FEATURES, row)) == {name: expected.get(name, 0) for name in FEATURES}


def test_a_route_no_feature_counts_is_refused_by_name():
    with pytest.raises(ValueError, match="from cpu to disk"):
        step_features([], np.zeros(0, dtype=np.int64), {(Medium.CPU, Medium.DISK): 1})


def test_the_default_grid_identifies_every_forward_pass_coefficient():
    features = grid_features()
    forward_columns = len(FEATURES) - 2  # no block moves in the grid
    assert np.linalg.matrix_rank(features[:, :forward_columns]) == forward_columns


# -- NNLS -------------------------------------------------------------------------------


@given(seeds)
def test_nnls_recovers_an_exact_nonnegative_solution(seed):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.0, 1.0, (30, 6))
    x = rng.uniform(0.0, 3.0, 6) * (rng.random(6) < 0.7)  # some exact zeros
    np.testing.assert_allclose(nnls(a, a @ x), x, rtol=1e-6, atol=1e-9)


@given(seeds)
def test_nnls_meets_the_optimality_conditions(seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(25, 5)) * rng.uniform(1e-3, 1e3, 5)  # badly scaled columns
    b = rng.normal(size=25)
    x = nnls(a, b)
    gradient = a.T @ (b - a @ x)  # minus the objective's gradient / 2
    scale = np.linalg.norm(a, axis=0) * max(np.linalg.norm(b), 1.0)
    assert (x >= 0).all()
    assert (gradient <= 1e-8 * scale).all()  # no column could lower the residual
    assert np.all(np.abs(gradient[x > 0]) <= 1e-8 * scale[x > 0])  # stationary where free


def test_nnls_gives_an_all_zero_column_coefficient_zero():
    a = np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]])
    np.testing.assert_allclose(nnls(a, np.array([2.0, 4.0, 6.0])), [2.0, 0.0])


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (np.ones((3, 2)), np.ones(2)),
        (np.ones(3), np.ones(3)),
        (np.full((2, 2), np.nan), np.ones(2)),
    ],
)
def test_nnls_rejects_bad_input(a, b):
    with pytest.raises(ValueError):
        nnls(a, b)


# -- fitting ----------------------------------------------------------------------------


@given(seeds)
def test_fit_recovers_known_coefficients_from_exact_times(seed):
    features = grid_features()
    truth = true_coefficients(np.random.default_rng(seed))
    fitted = fit(features, features @ truth)
    np.testing.assert_allclose(fitted.vector(), truth, rtol=1e-6, atol=1e-15)
    assert fitted.fit["heldout_mape"] < 1e-6
    assert fitted.fit["heldout_rows"] + fitted.fit["train_rows"] == fitted.fit["rows"]


@given(seeds)
def test_fit_with_noise_predicts_held_out_shapes_within_the_noise(seed):
    rng = np.random.default_rng(seed)
    features = grid_features()
    exact = features @ true_coefficients(rng)
    noisy = exact * rng.lognormal(0.0, 0.02, exact.size)  # 2 % timing noise
    fitted = fit(features, noisy)
    assert 0 < fitted.fit["heldout_mape"] < 0.05
    assert error_stats(fitted.predict(features), exact)["mape"] < 0.03
    assert (fitted.vector() >= 0).all()


def test_fit_refuses_too_few_rows_and_bad_times():
    features = grid_features()
    with pytest.raises(CalibrationError, match="at least"):
        fit(features[:3], np.ones(3))
    times = np.ones(len(features))
    times[4] = 0.0
    with pytest.raises(CalibrationError, match="positive"):
        fit(features, times)


def test_error_stats():
    stats = error_stats(np.array([1.1, 0.8, 2.0]), np.array([1.0, 1.0, 2.0]))
    assert stats["mape"] == pytest.approx((0.1 + 0.2 + 0.0) / 3)
    assert stats["mean_rel_error"] == pytest.approx((0.1 - 0.2) / 3)
    assert stats["n"] == 3
    assert error_stats(np.zeros(0), np.zeros(0))["mape"] is None


# -- file and executor ------------------------------------------------------------------


def sample_calibration(**profile) -> Calibration:
    coefficients = dict(zip(FEATURES, true_coefficients(np.random.default_rng(7))))
    return Calibration(coefficients, {"rows": 12}, dict(profile))


def test_save_and_load_round_trip(tmp_path):
    original = sample_calibration(model="tiny", device="cpu")
    loaded = load(save(original, tmp_path / "c.json"))
    assert loaded == original


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"format": "other"}', "not a pagesim calibration"),
        ('{"format": "pagesim-calibration", "version": 1, "coefficients": {"step": -1}}', ">= 0"),
        ('{"format": "pagesim-calibration", "version": 1, "coefficients": {"stpe": 1}}', "stpe"),
        ('{"format": "pagesim-calibration", "version": 9, "coefficients": {}}', "version"),
    ],
)
def test_load_rejects_bad_files_in_one_line(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(CalibrationError, match=message) as err:
        load(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_executor_predicts_features_times_coefficients():
    calibration = sample_calibration()
    model = CalibratedCostModel(calibration)
    chunk = PrefillChunk(0, 32, np.arange(16, dtype=np.int32))
    contexts = np.array([10, 20], dtype=np.int64)
    swaps = (Transfer(3, 4, GPU, CPU), Transfer(5, 6, GPU, CPU))
    batch = Batch(
        (chunk,),
        np.array([1, 2]),
        contexts,
        np.zeros(2, dtype=np.int32),
        transfers=(*swaps, Transfer(1, 2)),
    )
    moved = {SWAP_OUT: 2, DEVICE_COPY: 1}
    expected = step_features([(32, 16)], contexts, moved)
    expected = float(expected @ calibration.vector())
    assert model.execute(batch) == pytest.approx(expected)
    assert model.predict([(32, 16)], contexts, moved=moved) == pytest.approx(expected)
    assert expected > 0


def scenario_with(tmp_path, calibration: Calibration, model: str = "tiny"):
    save(calibration, tmp_path / "calibration.json")
    raw = {
        "model": model,
        "cache": {"num_blocks": 64},
        "simulation": {"num_requests": 4},
        "cost_model": {"kind": "calibrated", "file": "calibration.json"},
    }
    return validate_scenario(raw, base_dir=tmp_path)


def test_build_calibrated_executor_reads_the_scenarios_file(tmp_path):
    from sim.catalog.presets import MODEL_PRESETS

    calibration = sample_calibration(model_shape=model_shape_key(MODEL_PRESETS["tiny"]))
    executor = build_calibrated_executor(scenario_with(tmp_path, calibration))
    assert executor.calibration == calibration


def test_build_calibrated_executor_refuses_another_models_profile(tmp_path):
    from sim.catalog.presets import MODEL_PRESETS

    calibration = sample_calibration(model_shape=model_shape_key(MODEL_PRESETS["llama-3-8b"]))
    with pytest.raises(ScenarioError, match="profile this model"):
        build_calibrated_executor(scenario_with(tmp_path, calibration))


def test_calibration_json_is_plain_json(tmp_path):
    document = json.loads(save(sample_calibration(), tmp_path / "c.json").read_text())
    assert document["format"] == "pagesim-calibration"
    assert set(document["coefficients"]) == set(FEATURES)


# -- hostile calibration files ------------------------------------------------------------


def calibration_text(**changes) -> str:
    """A valid calibration document with ``changes`` (``coefficients`` merged; a value
    of ``...`` removes the key)."""
    document = json.loads(
        json.dumps(
            {
                "format": "pagesim-calibration",
                "version": 1,
                "coefficients": dict.fromkeys(FEATURES, 1e-6),
                "fit": {"rows": 12},
                "profile": {},
            }
        )
    )
    coefficients = changes.pop("coefficients", {})
    if isinstance(coefficients, dict):
        document["coefficients"].update(coefficients)
    else:
        document["coefficients"] = coefficients
    document.update(changes)
    for section in (document, document["coefficients"]):
        for key in [k for k, v in section.items() if v is ...] if isinstance(section, dict) else []:
            del section[key]
    return json.dumps(document)


HOSTILE_CALIBRATIONS = {
    "infinite coefficient": (
        calibration_text(coefficients={"tokens": float("inf")}),
        "coefficients.tokens: expected a finite number >= 0, got inf",
    ),
    "coefficient overflowing": (
        calibration_text().replace('"step": 1e-06', '"step": 1e999'),
        "coefficients.step: expected a finite number",
    ),
    "NaN coefficient": (calibration_text(coefficients={"seqs": float("nan")}), "coefficients.seqs"),
    "text coefficient": (calibration_text(coefficients={"seqs": "1e-6"}), "coefficients.seqs"),
    "boolean coefficient": (calibration_text(coefficients={"seqs": True}), "coefficients.seqs"),
    "missing coefficient": (
        calibration_text(coefficients={"decode_padded": ...}),
        "coefficients.decode_padded: missing",
    ),
    "coefficients a list": (calibration_text(coefficients=[1]), "coefficients: expected a mapping"),
    "fit a list": (calibration_text(fit=[1, 2]), "fit: expected a mapping"),
    "fit with NaN": (calibration_text(fit={"heldout_mape": float("nan")}), "fit.heldout_mape"),
    "profile a text": (calibration_text(profile="cpu"), "profile: expected a mapping"),
    "model shape a list": (calibration_text(profile={"model_shape": [2]}), "profile.model_shape"),
    "no version": (calibration_text(version=...), "version None, expected 1"),
    "a list": ("[]", "not a pagesim calibration"),
    "nested too deep": ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    "not UTF-8": (calibration_text().encode().replace(b'"rows"', b'"r\xe9ows"'), "not UTF-8"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_CALIBRATIONS))
def test_load_rejects_hostile_files_naming_the_field(tmp_path, case):
    text, message = HOSTILE_CALIBRATIONS[case]
    path = tmp_path / "bad.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(CalibrationError) as err:
        load(path)
    assert str(err.value).startswith(f"{path}:") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_folder_is_not_a_calibration(tmp_path):
    with pytest.raises(CalibrationError, match="is a folder"):
        load(tmp_path)


def test_run_with_an_infinite_coefficient_is_one_line_exit_2(tmp_path, capsys):
    from sim.cli import main

    (tmp_path / "c.json").write_text(calibration_text(coefficients={"tokens": 1e308 * 10}))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "model: tiny\ncache: {num_blocks: 64}\nsimulation: {num_requests: 4}\n"
        "cost_model: {kind: calibrated, file: c.json}\n"
    )
    code = main(["run", str(scenario), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1
    assert "c.json: coefficients.tokens: expected a finite number" in err
    assert not (tmp_path / "out").exists()
