"""`pagesim validate`: a reduced validation on the tiny model, the recording executor,
the error arithmetic and the report's structure (not its accuracy: that is the machine's)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest

from backend.step import Batch
from backend.transfer import CPU, GPU, SWAP_OUT, Transfer
from sim.cli import main
from sim.config.loader import validate_scenario
from sim.costs.calibrated import FEATURES, CalibratedCostModel, Calibration
from sim.hil.validation import CPU_TARGET, RecordingExecutor, end_to_end_errors, run_validation
from sim.hil.validation_page import COEFFICIENT_UNITS, coefficient_text, write_html
from sim.hil.validation_report import format_table, write_validation

ROOT = Path(__file__).resolve().parents[3]

SMALL = {
    "name": "small-validation",
    "model": "tiny",
    "cache": {"block_size": 16, "num_blocks": 64},
    "scheduler": {"max_num_seqs": 4, "max_num_batched_tokens": 64},
    "workload": {
        "arrival": {"kind": "poisson", "rate_rps": 200},
        "input": {"kind": "uniform", "min": 8, "max": 80},
        "output": {"kind": "uniform", "min": 2, "max": 8},
    },
    "simulation": {"num_requests": 6, "seed": 3},
    "backend": {"kind": "torch", "device": "cpu"},
}

#: plausible CPU unit costs (accuracy is not under test here)
COEFFICIENTS = {"step": 1e-3, "tokens": 1e-5, "seqs": 2e-5, "decode_context": 1e-7}


def calibration() -> Calibration:
    return Calibration({name: COEFFICIENTS.get(name, 0.0) for name in FEATURES}, {"rows": 0})


@pytest.fixture(scope="module")
def result():
    return run_validation(validate_scenario(SMALL), calibration(), step_repeats=2)


def is_finite_number(value) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def test_every_measured_step_is_recorded_and_predicted(result):
    measured_run = result.runs["measured"]
    assert len(result.records) == measured_run.num_steps > 0
    assert measured_run.steps.column("duration_s") == pytest.approx(result.measured_s)
    for name in ("calibrated", "analytic"):
        assert result.predictions[name].shape == (len(result.records),)
        assert (result.predictions[name] > 0).all()


def test_calibrated_predictions_are_the_calibrations_on_the_recorded_shapes(result):
    # The scalar model on each recorded shape: the run's vectorised predictions must line
    # up with the records, step for step.
    model = CalibratedCostModel(calibration())
    expected = [model.predict(*record.shape) for record in result.records]
    assert result.predictions["calibrated"] == pytest.approx(expected)


def test_report_errors_are_finite_and_come_from_both_runs(result):
    report = result.report
    assert report["num_measured_steps"] == len(result.records)
    for name in ("calibrated", "analytic"):
        per_step = report["per_step"][name]
        assert per_step["n"] == len(result.records)
        assert all(is_finite_number(per_step[k]) for k in ("mape", "p50_ape", "p90_ape"))
        expected = np.mean(np.abs(result.predictions[name] / result.measured_s - 1))
        assert per_step["mape"] == pytest.approx(expected)
        for key, entry in report["end_to_end"][name].items():
            assert all(is_finite_number(entry[k]) for k in ("measured", "predicted", "rel_error"))
            metric, _, quantile = key.partition(".")
            measured = result.runs["measured"].summary[metric]
            predicted = result.runs[name].summary[metric]
            assert entry["measured"] == (measured[quantile] if quantile else measured)
            assert entry["predicted"] == (predicted[quantile] if quantile else predicted)
    assert set(report["end_to_end"]["calibrated"]) >= {"ttft_s.p50", "tpot_s.p99", "e2e_s.p90"}
    assert report["target"]["bound"] == CPU_TARGET
    assert isinstance(report["target"]["met"], bool)


def test_the_three_runs_replay_the_same_trace(result):
    arrivals = {
        name: [request.arrival_s for request in run.outcomes] for name, run in result.runs.items()
    }
    assert arrivals["measured"] == arrivals["calibrated"] == arrivals["analytic"]
    assert all(run.summary["num_finished"] == 6 for run in result.runs.values())


def test_write_validation_files(result, tmp_path):
    out = write_validation(result, tmp_path / "v")
    report = json.loads((out / "validation.json").read_text())
    assert report["per_step"]["calibrated"]["n"] == len(result.records)
    html = (out / "validation.html").read_text()
    assert html.count("plotly-graph-div") == 2 and (out / "plotly.min.js").is_file()
    assert '<script src="plotly.min.js"></script>' in html
    steps = (out / "steps.csv").read_text().splitlines()
    assert len(steps) == len(result.records) + 1
    assert steps[0].split(",")[-3:] == ["measured_s", "calibrated_s", "analytic_s"]
    for name in ("measured", "calibrated", "analytic"):
        assert (out / name / "summary.json").is_file()


def test_the_page_has_html_tables_with_readable_names_coefficients_and_e2e_cdfs(result, tmp_path):
    html = write_html(result, tmp_path / "validation.html").read_text()
    errors = html.split('<table class="errors">')[1].split("</table>")[0]
    assert "| ---" not in html and "<th>error against the measured run</th>" in errors
    for name in (
        "per-step mean absolute error (MAPE)",
        "TTFT p50",
        "TPOT p99",
        "E2E p90",
        "throughput (requests/s)",
        "throughput (output tokens/s)",
    ):
        assert f"<td>{name}</td>" in errors, name
    assert "ttft_s" not in errors and "throughput_rps" not in errors
    # each coefficient with its value in a readable unit and what it is paid per
    assert "<td>step</td><td class=num>1 ms</td><td>per step</td>" in html
    assert "<td>tokens</td><td class=num>10 µs</td><td>per token computed" in html
    assert "<td>decode_context</td><td class=num>100 ns</td><td>per KV token a decode" in html
    assert set(COEFFICIENT_UNITS) == set(FEATURES)
    assert "E2E (ms)" in html and "Latency CDFs of the three runs" in html


def test_coefficient_text_picks_a_readable_unit():
    assert [coefficient_text(v) for v in (2.5, 1e-3, 3.1e-6, 4.2e-9, 5e-13, 0.0)] == [
        "2.5 s",
        "1 ms",
        "3.1 µs",
        "4.2 ns",
        "0.5 ps",
        "0",
    ]


def test_format_table_lists_both_models(result):
    table = format_table(result.report)
    assert "| per-step MAPE |" in table and "| ttft_s.p50 |" in table
    assert "calibrated" in table and "analytic" in table
    assert "error by step kind: decode-only" in table and "load average" in table


def test_format_table_when_the_measured_run_has_no_tpot(result):
    # One-token outputs have no TPOT: the table says n/a instead of failing.
    report = copy.deepcopy(result.report)
    report["runs"]["measured"]["tpot_s"]["p50"] = None
    assert "TPOT p50 n/a" in format_table(report)


def test_errors_by_step_kind_cover_every_step_and_take_the_sign_of_the_error(result):
    kinds = result.report["per_step_by_kind"]
    assert set(kinds) <= {"decode-only", "prefill-only", "mixed", "moves-only"}
    assert len(kinds) >= 2
    assert sum(kind["steps"] for kind in kinds.values()) == len(result.records)
    # Each kind's mean error lies between the extremes of its steps' signed errors.
    measured, predicted = result.measured_s, result.predictions["calibrated"]
    errors = (predicted - measured) / measured
    assert min(errors) <= min(k["mean_rel_error"] for k in kinds.values())
    assert max(k["mean_rel_error"] for k in kinds.values()) <= max(errors)


# -- pieces -----------------------------------------------------------------------------


class FakeExecutor:
    def __init__(self, times):
        self.times = list(times)
        self.calls = 0

    def execute(self, batch):
        self.calls += 1
        return self.times.pop(0)


def decode_batch(**moves) -> Batch:
    one = np.array([1], dtype=np.int64)
    return Batch((), one, np.array([5], dtype=np.int64), np.zeros(1, dtype=np.int32), **moves)


def test_recording_executor_keeps_the_minimum_of_its_repeats():
    recorder = RecordingExecutor(FakeExecutor([3.0, 1.0, 2.0]), repeats=3)
    assert recorder.execute(decode_batch()) == 1.0
    assert recorder.inner.calls == 3
    assert recorder.records[0].measured_s == 1.0
    assert recorder.records[0].shape.decode_context_lens.tolist() == [5]


def test_recording_executor_runs_steps_that_move_blocks_once():
    recorder = RecordingExecutor(FakeExecutor([3.0, 1.0]), repeats=2)
    assert recorder.execute(decode_batch(transfers=(Transfer(1, 2, GPU, CPU),))) == 3.0
    assert recorder.inner.calls == 1
    assert recorder.records[0].shape.moved == {SWAP_OUT: 1}


def test_end_to_end_errors_are_relative_to_the_measured_run():
    def summary(scale, throughput):
        quantiles = {"p50": 1.0 * scale, "p90": 2.0 * scale, "p99": 4.0 * scale}
        latencies = {m: dict(quantiles) for m in ("ttft_s", "tpot_s", "e2e_s")}
        return {**latencies, "throughput_rps": throughput, "throughput_tok_s": None}

    errors = end_to_end_errors(summary(1.0, 10.0), summary(1.1, 9.0))
    assert errors["ttft_s.p90"]["rel_error"] == pytest.approx(0.1)
    assert errors["throughput_rps"]["rel_error"] == pytest.approx(-0.1)
    assert errors["throughput_tok_s"]["rel_error"] is None


def test_validate_command_profiles_calibrates_and_reports(tmp_path, capsys):
    scenario = tmp_path / "small.yaml"
    scenario.write_text(json.dumps(SMALL))  # JSON is YAML
    out = tmp_path / "out"
    code = main(
        [
            "validate",
            str(scenario),
            "--out",
            str(out),
            "--quick",
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--max-context",
            "128",
            "--step-repeats",
            "1",
            "--quiet",
            "--no-report",
        ]
    )
    assert code == 0
    for name in ("profile.csv", "calibration.json", "validation.json", "steps.csv"):
        assert (out / name).is_file(), name
    assert "| per-step MAPE |" in capsys.readouterr().out
    report = json.loads((out / "validation.json").read_text())
    assert report["calibration"]["profile"]["model"] == "tiny"
    assert report["measurement"]["step_repeats"] == 1


def test_validate_refuses_another_models_calibration(tmp_path, capsys):
    from sim.costs.calibrated import save

    path = save(
        Calibration(dict.fromkeys(FEATURES, 1e-6), {}, {"model_shape": "L1-h8"}),
        tmp_path / "c.json",
    )
    scenario = tmp_path / "small.yaml"
    scenario.write_text(json.dumps(SMALL))
    assert main(["validate", str(scenario), "--calibration", str(path), "--quiet"]) == 2
    assert "profile this model" in capsys.readouterr().err


def test_shipped_validation_scenario_loads():
    from sim.config.loader import load_scenario

    scenario = load_scenario(ROOT / "scenarios" / "validation.yaml")
    assert scenario.model.name == "tiny" and scenario.backend.kind == "torch"


def test_the_validation_page_loads_in_chromium_with_every_plot_drawn(result, chromium, tmp_path):
    from tests.browser import check_page

    out = write_validation(result, tmp_path / "v")
    checked = check_page(chromium, out / "validation.html")
    assert checked["errors"] == [] and checked["plotly"]
    assert [plot["id"] for plot in checked["plots"]] == ["steps", "cdf"]
    for plot in checked["plots"]:
        assert plot["drawn"] and plot["with_points"] == plot["traces"] > 0, plot
