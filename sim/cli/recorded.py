"""``pagesim import-run FORMAT PATH --out RUN``: a real engine's recorded run as an
observed run folder plus the scenario that replays it (sim.recorded).

The model is ``--model`` (a preset, a config.json, or a HuggingFace repository whose
config.json pagesim ships) or the repository the run names; the GPU is ``--hardware`` or
the device the run names. Engine arguments the run did not record come from
``--engine-args FILE`` (vLLM's names), then from the engine's defaults.
"""

from __future__ import annotations

from pathlib import Path

from sim.cli.common import UsageError

__all__ = ["add_commands"]


def add_commands(subparsers) -> None:
    """Register ``import-run``. Mutates ``subparsers``."""
    from sim.recorded import FORMATS

    cmd = subparsers.add_parser(
        "import-run", help="a real engine's recorded run as an observed run folder + its replay"
    )
    cmd.add_argument(
        "format",
        choices=FORMATS,
        help="what wrote the run (docs/recorded-runs.md: what each needs)",
    )
    cmd.add_argument("path", help="the recorded run: its report folder or file")
    cmd.add_argument("--out", required=True, help="the run folder to write")
    cmd.add_argument("--model", help="preset, config.json, or HuggingFace repository name")
    cmd.add_argument("--hardware", help="GPU preset (pagesim list hardware)")
    cmd.add_argument(
        "--engine-args", metavar="FILE", help="YAML/JSON of engine arguments the run did not record"
    )
    cmd.add_argument(
        "--metadata",
        metavar="FILE",
        help="lifecycle / vllm-bench: the run's metadata (default: meta.json beside)",
    )
    cmd.add_argument(
        "--prompts",
        metavar="FILE",
        help="lifecycle: the workload JSONL with input_tok_ids (prompt identity)",
    )
    cmd.add_argument(
        "--benchmark",
        type=int,
        metavar="I",
        help="guidellm: which benchmark of the report (0 first)",
    )
    cmd.add_argument(
        "--engine-log",
        metavar="FILE",
        help="the engine's log (vLLM's stats lines: its prefix cache hit rate)",
    )
    cmd.add_argument(
        "--source",
        help="how the run's origin is named in its folder (default: "
        "PATH), e.g. a repository, commit and path",
    )
    cmd.add_argument("--force", action="store_true", help="replace the run in --out")
    cmd.add_argument("--no-report", action="store_true", help="skip report.html")
    cmd.add_argument("--quiet", action="store_true", help="no table")
    cmd.set_defaults(handler=cmd_import_run)


def cmd_import_run(args) -> int:
    from sim.recorded import RecordError, import_run
    from sim.run.folders import check_target

    out = Path(args.out)
    try:
        check_target(out, force=args.force)
    except ValueError as err:  # FolderExists included
        raise UsageError(f"--out: {err}") from None
    try:
        summary = import_run(
            args.format,
            Path(args.path),
            out,
            model=args.model,
            hardware=args.hardware,
            engine_args=Path(args.engine_args) if args.engine_args else None,
            metadata=Path(args.metadata) if args.metadata else None,
            prompts=Path(args.prompts) if args.prompts else None,
            engine_log=Path(args.engine_log) if args.engine_log else None,
            benchmark=args.benchmark,
            force=args.force,
            html=not args.no_report,
            source=args.source,
        )
    except RecordError as err:
        raise UsageError(str(err)) from None
    if not args.quiet:
        print(_table(summary))
        print(f"wrote {out} (replay: pagesim validate {out / 'scenario.yaml'} --observed {out})")
    return 0


def _table(summary: dict) -> str:
    lines = [f"{'latency (ms, whole run)':<24}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}"]
    for metric, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E")):
        row = summary.get(metric) or {}
        cells = "".join(
            f"{'-' if row.get(q) is None else f'{1e3 * row[q]:,.1f}':>10}"
            for q in ("mean", "p50", "p90", "p99")
        )
        lines.append(f"{label:<24}{cells}")
    recorded = summary.get("recorded") or {}
    lines.append(f"requests {summary.get('num_requests')}, failed {summary.get('num_rejected')}")
    lines += [f"note: {note}" for note in recorded.get("notes", [])]
    return "\n".join(lines)


def is_recorded(run: str) -> bool:
    """Whether ``run`` is a folder ``pagesim import-run`` wrote (its summary names a
    recorded run). RecordError (one line) for a summary.json that is there but is not a
    JSON object: which kind of run it is cannot be told, and guessing gave the other
    kind's error."""
    from sim.recorded.files import read_json
    from sim.recorded.run import RecordError

    path = Path(run) / "summary.json"
    if not path.exists():
        return False
    summary = read_json(path)
    if not isinstance(summary, dict):
        raise RecordError(f"{path}: expected a JSON object (a run's summary)")
    return "recorded" in summary


def cmd_calibrate_recorded(args) -> int:
    """``pagesim calibrate --observed RUN [RUN...]`` on recorded runs of one GPU: the
    physical figures fitted (sim.recorded.calibrate), written as a calibration file, with
    the error on ``--holdout`` runs."""
    import shlex
    import sys

    from sim.cli.common import output_file
    from sim.recorded.calibrate import (
        check_run,
        evaluation_budget,
        fit_runs,
        run_info,
        write_calibration,
    )
    from sim.run.folders import atomic_file
    from sim.run.progress import Progress

    if args.max_evaluations < 1:
        raise UsageError("--max-evaluations: expected at least 1")
    runs = [Path(r) for r in args.observed]
    holdout = [Path(r) for r in args.holdout]
    missing = [str(r) for r in holdout if not is_recorded(str(r))]
    if missing:
        raise UsageError(f"--holdout: {missing[0]}: not a recorded run (pagesim import-run)")
    for run in (*runs, *holdout):  # a damaged folder is one line before any simulation
        check_run(run)
    gpu = run_info(runs[0])["gpu"]
    out = output_file(args.out or f"{gpu}-calibration.yaml", "--out")
    budget = evaluation_budget(args.max_evaluations)
    bar = Progress(budget, f"fitting {len(runs)} run(s)", enabled=not args.quiet, unit="sim")
    done = iter(range(1, budget + 1))
    try:
        fit = fit_runs(
            runs,
            max_evaluations=args.max_evaluations,
            on_evaluation=lambda: bar.update(next(done, budget)),
        )
    except ValueError as err:
        raise UsageError(f"--observed: {err}") from None
    finally:
        bar.close()
    with atomic_file(out) as partial:
        write_calibration(fit, run_info(runs[0])["hardware"], partial, shlex.join(sys.argv))
    print(_fit_table(fit))
    if holdout:
        print(_holdout_table(holdout, out, fit.client_overhead_s))
    print(f"wrote {out} (a scenario takes it as calibration: {out})")
    return 0


def _fit_table(fit) -> str:
    lines = [f"fitted on {len(fit.runs)} run(s): {', '.join(fit.runs)}"]
    lines += [f"  left out {name}: {why}" for name, why in fit.left_out.items()]
    lines += [f"  {name:<30} {value:.4g}" for name, value in fit.values.items()]
    lines.append(f"  {'client overhead (ms)':<30} {1e3 * fit.client_overhead_s:.1f}")
    lines += [f"  not identified: {name}: {why}" for name, why in fit.not_identified.items()]
    lines.append(
        f"mean |log error| over every figure: {fit.loss_before:.3f} -> "
        f"{fit.loss_after:.3f} ({fit.evaluations} evaluations)"
    )
    return "\n".join(lines)


def _holdout_table(runs, calibration: Path, shift: float) -> str:
    from sim.recorded.calibrate import simulate_run
    from sim.recorded.stages import compare, figures

    lines = ["held out (whole runs):"]
    for run in runs:
        for label, path in (("datasheet", None), ("calibrated", calibration)):
            recorded, requests, windows, timeout = simulate_run(run, path, None)
            simulated = figures(
                requests, windows, timeout_s=timeout, shift_s=shift if path else 0.0
            )
            mape = compare(recorded, simulated)["mape"]
            shown = "n/a" if mape is None else f"{100 * mape:.1f}%"
            lines.append(f"  {run.name:<32} {label:<11} MAPE {shown}")
    return "\n".join(lines)
