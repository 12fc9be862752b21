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

FORMATS = ("inference-perf", "lifecycle", "vllm-bench", "sglang-bench")


def add_commands(subparsers) -> None:
    """Register ``import-run``. Mutates ``subparsers``."""
    cmd = subparsers.add_parser(
        "import-run", help="a real engine's recorded run as an observed run folder + its replay"
    )
    cmd.add_argument("format", choices=FORMATS, help="what wrote the run (see the README)")
    cmd.add_argument("path", help="the recorded run: its report folder or file")
    cmd.add_argument("--out", required=True, help="the run folder to write")
    cmd.add_argument("--model", help="preset, config.json, or HuggingFace repository name")
    cmd.add_argument("--hardware", help="GPU preset (pagesim list hardware)")
    cmd.add_argument("--engine-args", metavar="FILE",
                     help="YAML/JSON of engine arguments the run did not record")  # fmt: skip
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
    cmd.add_argument("--source", help="how the run's origin is named in its folder (default: "
                     "PATH), e.g. a repository, commit and path")  # fmt: skip
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
            args.format, Path(args.path), out, model=args.model, hardware=args.hardware,
            engine_args=Path(args.engine_args) if args.engine_args else None,
            metadata=Path(args.metadata) if args.metadata else None,
            prompts=Path(args.prompts) if args.prompts else None,
            force=args.force, html=not args.no_report, source=args.source,
        )  # fmt: skip
    except RecordError as err:
        raise UsageError(str(err)) from None
    if not args.quiet:
        print(_table(summary))
        print(f"wrote {out} (replay: pagesim validate {out / 'scenario.yaml'} --observed {out})")
    return 0


def _table(summary: dict) -> str:
    lines = [f"{'latency (ms)':<14}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}"]
    for metric, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E")):
        row = summary.get(metric) or {}
        cells = "".join(
            f"{'-' if row.get(q) is None else f'{1e3 * row[q]:,.1f}':>10}"
            for q in ("mean", "p50", "p90", "p99")
        )
        lines.append(f"{label:<14}{cells}")
    recorded = summary.get("recorded") or {}
    lines.append(f"requests {summary.get('num_requests')}, failed {summary.get('num_rejected')}")
    lines += [f"note: {note}" for note in recorded.get("notes", [])]
    return "\n".join(lines)
