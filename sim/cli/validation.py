"""The `pagesim profile`, `pagesim calibrate` and `pagesim validate` subcommands.

:func:`add_commands` registers them on the parser of :mod:`sim.cli` (``python -m sim.cli
validate ...`` runs them where no ``pagesim`` script is installed). User mistakes end in
one line and exit code 2, as every command's.
"""

from __future__ import annotations

import os
from pathlib import Path

from sim.cli.common import (
    UsageError,
    add_scenario_options,
    load,
    load_calibration,
    output_file,
    output_folder,
    require,
)

__all__ = ["add_commands"]


def add_commands(subparsers) -> None:
    """Register ``profile``, ``calibrate`` and ``validate`` on an argparse subparsers
    object (``parser.add_subparsers(...)``). Mutates ``subparsers``."""
    _add_profile(subparsers)
    _add_calibrate(subparsers)
    _add_validate(subparsers)


def _add_timing_options(parser, repeats: int) -> None:
    parser.add_argument(
        "--repeats",
        type=int,
        default=repeats,
        help=f"timed runs of each profiled shape (default {repeats})",
    )
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs first (default 2)")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads on the CPU (default 1: steadier timings)",
    )
    parser.add_argument("--quick", action="store_true", help="a coarser grid (about 1/3)")
    parser.add_argument(
        "--max-context",
        type=int,
        default=None,
        help="longest profiled context (default: min(max_model_len, 1024))",
    )


def _add_profile(sub) -> None:
    cmd = sub.add_parser("profile", help="time the real backend over a grid of step shapes")
    source = cmd.add_mutually_exclusive_group(required=True)
    source.add_argument("--scenario", help="take model, block size and limits from a scenario")
    source.add_argument("--model", help="a model preset name (e.g. tiny, llama-3-8b)")
    cmd.add_argument("--block-size", type=int, default=16, help="with --model (default 16)")
    cmd.add_argument("--device", choices=("cpu", "cuda"), help="default: the scenario's, or cpu")
    cmd.add_argument(
        "--dtype",
        choices=("float32", "float16", "bfloat16"),
        help="default: the scenario's, or float32",
    )
    cmd.add_argument("--out", default="profile.csv", help="CSV to write (default profile.csv)")
    cmd.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_timing_options(cmd, repeats=7)
    add_scenario_options(cmd)
    cmd.set_defaults(handler=cmd_profile)


def _add_calibrate(sub) -> None:
    cmd = sub.add_parser("calibrate", help="fit the calibrated cost model to a profile CSV")
    cmd.add_argument("profile", nargs="?", help="CSV written by `pagesim profile`")
    cmd.add_argument(
        "--observed",
        metavar="RUN",
        nargs="+",
        help="fit to a `pagesim observe` run instead, or to recorded runs of one GPU "
        "(`pagesim import-run` folders): their physical figures, as a calibration file",
    )
    cmd.add_argument(
        "--holdout",
        metavar="RUN",
        nargs="+",
        default=[],
        help="recorded runs to report the fit's error on, not to fit",
    )
    cmd.add_argument(
        "--max-evaluations",
        type=int,
        default=40,
        help="recorded runs: how many simulations of the runs the fit may spend",
    )
    cmd.add_argument("--quiet", action="store_true", help="no progress bar")
    cmd.add_argument(
        "--out", help="(default calibration.json; recorded runs: <gpu>-calibration.yaml)"
    )
    cmd.add_argument(
        "--statistic",
        default="min_s",
        choices=("min_s", "median_s", "p10_s"),
        help="which measured column to fit (default min_s; see sim/hil/profiling.py)",
    )
    cmd.set_defaults(handler=cmd_calibrate)


def _add_validate(sub) -> None:
    cmd = sub.add_parser("validate", help="real backend vs calibrated and analytic models")
    cmd.add_argument("scenario", help="scenario YAML file")
    cmd.add_argument("--observed", metavar="RUN", help="compare with a `pagesim observe` run")
    cmd.add_argument("--calibration", help="calibration JSON (default: profile and fit first)")
    cmd.add_argument("--out", help="output directory (default runs/<scenario>-validation)")
    cmd.add_argument("--force", action="store_true", help="replace what --out holds")
    cmd.add_argument(
        "--step-repeats",
        type=int,
        default=5,
        help="runs of each measured step, the minimum kept (default 5)",
    )
    cmd.add_argument("--no-report", action="store_true", help="skip validation.html")
    cmd.add_argument("--quiet", action="store_true", help="no progress bars")
    _add_timing_options(cmd, repeats=5)
    add_scenario_options(cmd)
    cmd.set_defaults(handler=cmd_validate)


# --------------------------------------------------------------------------------------
# Handlers
# --------------------------------------------------------------------------------------


def _check_positive(**values) -> None:
    for name, value in values.items():
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {value}")


def _check_timing_options(args, **positive) -> None:
    """The timing options' ranges (and ``positive``'s, each >= 1); UsageError if not."""
    _check_positive(
        repeats=args.repeats, threads=args.threads, max_context=args.max_context, **positive
    )
    if args.warmup < 0:
        raise UsageError(f"--warmup must be >= 0, got {args.warmup}")
    cpus = os.cpu_count() or 1
    if args.threads is not None and args.threads > cpus:
        raise UsageError(
            f"--threads must be at most {cpus} (this machine's CPUs), got {args.threads}"
        )


def _check_model_limits(args, model, block_size: int) -> None:
    """--max-context and the block size within the model's max_model_len."""
    for option, value in (("--max-context", args.max_context), ("--block-size", block_size)):
        if value is not None and value > model.max_model_len:
            raise UsageError(
                f"{option} {value} is beyond {model.name}'s max_model_len ({model.max_model_len})"
            )


def _profile_rows(
    model, *, block_size, device, dtype, max_num_seqs, max_batched_tokens, args, seed, progress
):
    """Run the grid for these limits; raises UsageError for an absent CUDA device."""
    from sim.hil.profiling import default_grid, profile

    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda, but no CUDA device is available")
    max_context = args.max_context or min(model.max_model_len, 1024)
    shapes = default_grid(
        max_num_seqs=max_num_seqs,
        max_batched_tokens=max_batched_tokens,
        max_context=max_context,
        block_size=block_size,
        quick=args.quick,
    )
    return profile(
        model,
        shapes,
        block_size=block_size,
        device=device,
        dtype=dtype,
        warmup=args.warmup,
        repeats=args.repeats,
        seed=seed,
        cpu_threads=args.threads or 1,
        progress=progress,
    )


def cmd_profile(args) -> int:
    from sim.catalog.presets import resolve_model
    from sim.hil.profiling import write_profile
    from sim.run.folders import atomic_file

    _check_timing_options(args, block_size=args.block_size)
    out = output_file(args.out, "--out")
    if args.scenario:
        scenario = load(args.scenario, args.overrides, args.seed)
        model, block_size = scenario.model, scenario.cache.block_size
        device = args.device or scenario.backend.device
        dtype = args.dtype or scenario.backend.dtype
        limits = (scenario.scheduler.max_num_seqs, scenario.scheduler.max_num_batched_tokens)
        seed = scenario.simulation.seed
    else:
        try:
            model = resolve_model(args.model)
        except ValueError as err:
            raise UsageError(f"--model: {err}") from None
        block_size, device, dtype = args.block_size, args.device or "cpu", args.dtype or "float32"
        limits, seed = (16, 512), args.seed or 0
    _check_model_limits(args, model, block_size)
    require("torch", "profile")  # after every check that does not need it
    rows = _profile_rows(
        model,
        block_size=block_size,
        device=device,
        dtype=dtype,
        max_num_seqs=limits[0],
        max_batched_tokens=limits[1],
        args=args,
        seed=seed,
        progress=not args.quiet,
    )
    with atomic_file(out) as partial:
        write_profile(rows, partial)
    print(f"profiled {len(rows)} step shapes of {model.name} on {device}; wrote {out}")
    return 0


def _calibrate(profile_path, out_path, statistic: str):
    from sim.costs.calibrated import save
    from sim.hil.fit import fit
    from sim.hil.profiling import read_profile
    from sim.run.folders import atomic_file

    try:
        shapes, seconds, meta = read_profile(profile_path, statistic)
        features = [shape.features() for shape in shapes]
        fitted = fit(features, seconds, profile={**meta, "file": str(profile_path)})
    except ValueError as err:  # CalibrationError is a ValueError
        raise UsageError(str(err)) from None
    with atomic_file(Path(out_path)) as partial:
        save(fitted, partial)
    return fitted


def format_calibration(fitted) -> str:
    """Coefficients and fit errors as text."""
    lines = ["coefficient           seconds per unit"]
    lines += [f"  {name:<20} {value:.4g}" for name, value in fitted.coefficients.items()]
    fit = fitted.fit
    if fit.get("heldout_mape") is not None:
        lines.append(
            f"held-out error ({fit['heldout_rows']} of {fit['rows']} shapes): "
            f"MAPE {100 * fit['heldout_mape']:.1f}%, p90 APE {100 * fit['heldout_p90_ape']:.1f}%"
        )
    lines.append(
        f"all-shapes error: MAPE {100 * fit['all_rows_mape']:.1f}%, "
        f"p90 APE {100 * fit['all_rows_p90_ape']:.1f}%"
    )
    return "\n".join(lines)


def cmd_calibrate(args) -> int:
    if (args.profile is None) == (args.observed is None):
        raise UsageError("give a profile CSV or --observed RUN (one of them)")
    if args.observed is not None:
        from sim.cli.observed import cmd_calibrate_observed
        from sim.cli.recorded import cmd_calibrate_recorded, is_recorded

        if all(is_recorded(run) for run in args.observed):
            return cmd_calibrate_recorded(args)
        if len(args.observed) > 1:
            raise UsageError(
                "--observed: several runs are fitted together only when each is a "
                "recorded run (pagesim import-run); give one `pagesim observe` run"
            )
        args.observed = args.observed[0]
        args.out = args.out or "calibration.json"
        return cmd_calibrate_observed(args)
    args.out = args.out or "calibration.json"
    output_file(args.out, "--out")
    fitted = _calibrate(args.profile, args.out, args.statistic)
    print(format_calibration(fitted))
    print(f"wrote {args.out}")
    return 0


def cmd_validate(args) -> int:
    from sim.config.errors import ScenarioError
    from sim.hil.profiling import write_profile
    from sim.hil.validation import run_validation
    from sim.hil.validation_report import format_table, write_validation
    from sim.run.folders import atomic_file

    if args.observed is not None:
        from sim.cli.observed import cmd_validate_observed

        return cmd_validate_observed(args)
    _check_timing_options(args, step_repeats=args.step_repeats)
    scenario = load(args.scenario, args.overrides, args.seed)
    out = Path(args.out) if args.out else Path("runs") / f"{scenario.name}-validation"
    output_folder(out, "--out", force=args.force)
    device = scenario.backend.device
    fitted = load_calibration(args.calibration, scenario) if args.calibration else None
    if fitted is None:
        _check_model_limits(args, scenario.model, scenario.cache.block_size)
    require("torch", "validate")  # after every check that does not need it
    if fitted is None:
        if not args.quiet:
            print(f"no --calibration: profiling {scenario.model.name} on {device} first")
        rows = _profile_rows(
            scenario.model,
            block_size=scenario.cache.block_size,
            device=device,
            dtype=scenario.backend.dtype,
            max_num_seqs=scenario.scheduler.max_num_seqs,
            max_batched_tokens=scenario.scheduler.max_num_batched_tokens,
            args=args,
            seed=scenario.simulation.seed,
            progress=not args.quiet,
        )
        profile_path = out / "profile.csv"
        with atomic_file(profile_path) as partial:
            write_profile(rows, partial)
        fitted = _calibrate(profile_path, out / "calibration.json", "min_s")
        if not args.quiet:
            print(format_calibration(fitted))
    try:
        result = run_validation(
            scenario,
            fitted,
            step_repeats=args.step_repeats,
            cpu_threads=args.threads or 1,
            progress=not args.quiet,
        )
    except ScenarioError as err:
        raise UsageError(str(err)) from None
    write_validation(result, out, html=not args.no_report)
    print(format_table(result.report))
    print(f"wrote {out}/validation.json" + ("" if args.no_report else " and validation.html"))
    return 0
