"""``pagesim validate SCENARIO --observed RUN`` and ``pagesim calibrate --observed RUN``
(registered with their commands in sim.cli.validation): a simulation against an observed
run, and the cost model fitted to one (sim.live.compare, sim.live.fit). Every file of
the run they read is checked: one line naming it, exit code 2.
"""

from __future__ import annotations

from pathlib import Path

from sim.cli.common import UsageError, load, load_calibration, output_file, output_folder, require


def _run_scenario(run: Path) -> dict:
    from sim.cli.compare import read_scenario

    return read_scenario(run / "scenario.json", str(run))


def cmd_calibrate_observed(args) -> int:
    """``pagesim calibrate --observed RUN``: fit the cost model to an observed run."""
    from types import SimpleNamespace

    from sim.costs.calibrated import CalibrationError, model_shape_key, save
    from sim.live.fit import fit_observed
    from sim.run.folders import atomic_file

    out = output_file(args.out, "--out")
    run = Path(args.observed)
    scenario = _run_scenario(run)
    timings = read_timings(run)
    try:
        fitted = fit_observed(
            timings, source=str(run), token_budget=scenario["scheduler"]["max_num_batched_tokens"]
        )
    except CalibrationError as err:
        raise UsageError(str(err)) from None
    model = scenario["model"]
    shape = model_shape_key(SimpleNamespace(**model))
    fitted.profile.update(
        model=model["name"], model_shape=shape, device="observed", observed_run=str(run)
    )
    with atomic_file(out) as partial:
        save(fitted, partial)
    print(format_observed_fit(fitted))
    print(f"wrote {out}")
    return 0


def format_observed_fit(fitted) -> str:
    """What the fit found, and what it could not tell apart."""
    ttft, itl = fitted.fit["ttft_fit"], fitted.fit["itl_fit"]
    lines = [
        f"TTFT of {ttft['requests']} lone requests ({ttft['prompt_tokens'][0]}-"
        f"{ttft['prompt_tokens'][1]} prompt tokens): {1e3 * ttft['intercept_s']:.3f} ms per "
        f"prefill step + {1e6 * ttft['per_token_s']:.3f} us per token "
        f"(+ {1e9 * ttft['per_pair_s']:.3f} ns per attention pair); MAPE "
        f"{100 * ttft['mape']:.1f}%",
        f"ITL of {itl['gaps']} decode gaps (batch {itl['batch_sizes'][0]}-"
        f"{itl['batch_sizes'][-1]}): {1e3 * itl['intercept_s']:.3f} ms per step + "
        f"{1e3 * itl['per_sequence_s']:.3f} ms per sequence; MAPE of the mean gaps "
        f"{100 * itl['mean_gap_mape']:.1f}%",
        "coefficient           seconds per unit",
    ]
    lines += [f"  {name:<20} {value:.4g}" for name, value in fitted.coefficients.items() if value]
    lines.append("identified: " + "; ".join(fitted.fit["identified"]))
    lines.append(
        "not identified (left at 0 or a chosen split): " + "; ".join(fitted.fit["not_identified"])
    )
    return "\n".join(lines)


def read_timings(run: Path):
    """The send, first-token and end times of an observed run's requests, their prompt
    lengths and every token's arrival (observed.csv, requests.csv, tokens.csv); a
    UsageError names the file that is missing or wrong."""
    import numpy as np

    from sim.cli.compare import read_csv_columns
    from sim.live.fit import Timings

    where = str(run)
    seen = read_csv_columns(
        run / "observed.csv", ("req_id", "send_s", "first_token_s", "end_s"), where
    )
    table = read_csv_columns(run / "requests.csv", ("req_id", "prompt_tokens"), where)
    tokens = read_csv_columns(run / "tokens.csv", ("req_id", "choice", "time_s"), where)
    prompt = dict(zip(table["req_id"].tolist(), table["prompt_tokens"].tolist()))
    missing = [r for r in seen["req_id"].tolist() if r not in prompt]
    if missing:
        raise UsageError(f"{run / 'requests.csv'}: no row for request {int(missing[0])}")
    end = seen["end_s"].copy()
    for i, req in enumerate(seen["req_id"].tolist()):  # a failed stream ends at its last token
        mine = tokens["time_s"][tokens["req_id"] == req]
        if np.isnan(end[i]) and mine.size:
            end[i] = mine.max()
    return Timings(
        seen["req_id"],
        seen["send_s"],
        seen["first_token_s"],
        end,
        np.array([prompt[r] for r in seen["req_id"].tolist()]),
        tokens["req_id"],
        tokens["choice"],
        tokens["time_s"],
    )


def cmd_validate_observed(args) -> int:
    """``pagesim validate SCENARIO --observed RUN``: simulate the scenario and set it
    against what the endpoint showed."""
    import json

    from sim.cli.compare import read_summary
    from sim.live.compare import build_report, format_report
    from sim.run.folders import atomic_file
    from sim.run.runner import write_run

    scenario = load(args.scenario, args.overrides, args.seed)
    run = Path(args.observed)
    observed = read_summary(run / "summary.json", str(run))
    if not isinstance(observed.get("observed"), dict):
        raise UsageError(f"{run}: not an observed run (pagesim observe writes one)")
    _check_same_requests(scenario, _run_scenario(run), run)
    out = Path(args.out) if args.out else Path("runs") / f"{scenario.name}-validation-observed"
    output_folder(out, "--out", force=args.force)
    simulated, cost_model = _simulate(scenario, args.calibration)
    write_run(simulated, scenario, out / "simulated", html=not args.no_report, force=True)
    report = build_report(
        scenario,
        observed,
        _as_the_client_saw(simulated.summary, observed),
        run=str(run),
        cost_model=cost_model,
        prefix=_prefix_rates(observed, simulated),
        series=_series_means(observed, simulated),
    )
    with atomic_file(out / "validation.json") as partial:
        partial.write_text(json.dumps(report, indent=2, sort_keys=True, allow_nan=False) + "\n")
    print(format_report(report))
    print(f"wrote {out}/validation.json and {out}/simulated/")
    return 0


def _series_means(observed: dict, simulated) -> dict | None:
    """The recording's own time series (running, waiting, generated tokens a second)
    and the replay's, time-averaged over the span it covers; None without one."""
    from sim.recorded.stages import series_means

    series = (observed.get("recorded") or {}).get("series")
    if not series or not series.get("t"):
        return None
    return {name: list(pair) for name, pair in series_means(simulated.steps, series).items()}


def _prefix_rates(observed: dict, simulated) -> dict | None:
    """The recording's prefix cache hit rate and the replay's over the same requests:
    the engine log's (its last 1,000 requests) where import-run read one, else what the
    server reported per request (cached prompt tokens, the whole run); None if neither."""
    from sim.output.requests import request_table
    from sim.output.summary import recent_prefix_hit_rate
    from sim.recorded.engine_log import VLLM_HIT_RATE_REQUESTS

    logged = (observed.get("recorded") or {}).get("prefix_hit_rate")
    if logged is not None:
        table = request_table(simulated.outcomes)
        replay = recent_prefix_hit_rate(table, VLLM_HIT_RATE_REQUESTS)
        over = f"engine log: the last {VLLM_HIT_RATE_REQUESTS:,} requests"
        return {"recorded": logged, "replay": replay, "over": over}
    server = observed.get("observed") or {}
    cached, prompts = server.get("server_cached_prompt_tokens"), server.get("server_prompt_tokens")
    if cached is not None and prompts:
        return {
            "recorded": cached / prompts,
            "replay": simulated.summary.get("prefix_hit_rate"),
            "over": "cached prompt tokens the server reported, the whole run",
        }
    return None


def _as_the_client_saw(simulated: dict, observed: dict) -> dict:
    """A simulated summary as a benchmark client would have timed it, for a recorded run
    timed by one (``recorded.clock: client``): TTFT and E2E plus the client's overhead
    (sim.recorded.stages.CLIENT_OVERHEAD_S; a constant shift moves every quantile by
    itself). Other runs, and the simulation's own files, unchanged."""
    from sim.recorded.stages import CLIENT_OVERHEAD_S

    if (observed.get("recorded") or {}).get("clock") != "client":
        return simulated
    shifted = dict(simulated)
    for metric in ("ttft_s", "e2e_s"):
        shifted[metric] = {
            q: None if v is None else v + CLIENT_OVERHEAD_S
            for q, v in (simulated.get(metric) or {}).items()
        }
    return shifted


#: Scenario fields that decide the request stream: an observed run of another stream
#: cannot be compared request for request.
_STREAM_FIELDS = (
    ("workload",),
    ("simulation", "seed"),
    ("simulation", "num_requests"),
    ("model", "name"),
)


def _check_same_requests(scenario, observed_scenario: dict, run: Path) -> None:
    mine = scenario.model_dump(mode="json")
    for path in _STREAM_FIELDS:
        a, b = mine, observed_scenario
        for key in path:
            a, b = a.get(key), (b or {}).get(key)
        if a != b:
            field = ".".join(path)
            raise UsageError(
                f"{run}: observed with another {field} than {scenario.source}'s; validate "
                "with the scenario the run was observed with"
            )


def _simulate(scenario, calibration_path):
    from sim.config.errors import ScenarioError
    from sim.engine.policy_guard import PolicyFailure, StuckRun
    from sim.run.runner import simulate

    factory, cost_model = None, {"kind": scenario.cost_model.kind}
    if calibration_path:
        from sim.costs.calibrated import CalibratedCostModel

        model = CalibratedCostModel(load_calibration(calibration_path, scenario))
        factory, cost_model = (lambda *_: model), {"kind": "calibrated", "file": calibration_path}
    elif scenario.backend.kind == "torch":
        require("torch", "validate")
        cost_model = {"kind": "measured", "backend": scenario.backend.device}
    try:
        return simulate(scenario, executor_factory=factory), cost_model
    except ScenarioError as err:
        raise UsageError(str(err)) from None
    except (PolicyFailure, StuckRun) as err:
        raise UsageError(f"{scenario.source}: {err}; nothing was written") from None
