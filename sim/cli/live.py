"""``pagesim observe`` and ``pagesim serve``: a scenario against a live endpoint, and an
endpoint over the real backend (sim.live). ``validate --observed`` and ``calibrate
--observed`` are registered in sim.cli.validation and handled in sim.cli.observed.

The HTTP stack is the ``serve`` extra; without it these commands end in one line naming
it (exit code 2), after every check that does not need it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sim.cli.common import UsageError, add_scenario_options, load, port, positive_int, require

__all__ = ["add_commands"]


def add_commands(subparsers) -> None:
    """Register ``observe`` and ``serve``. Mutates ``subparsers``."""
    observe = subparsers.add_parser(
        "observe", help="replay a scenario's requests against a live OpenAI-compatible endpoint"
    )
    observe.add_argument("scenario", help="scenario YAML file (its requests are replayed)")
    observe.add_argument(
        "--endpoint",
        required=True,
        metavar="URL",
        help="http://HOST:PORT (the API path is added) or the full /v1/... URL",
    )
    observe.add_argument(
        "--api",
        choices=("completions", "chat"),
        default="completions",
        help="/v1/completions (default) or /v1/chat/completions",
    )
    observe.add_argument(
        "--prompt-mode",
        choices=("tokens", "text"),
        default="tokens",
        help="send prompts as token id lists (default; vLLM takes them) or as text",
    )
    observe.add_argument("--model", help="the model name to ask for (default: the scenario's)")
    observe.add_argument(
        "--max-connections", type=int, default=64, help="requests in flight at most (default 64)"
    )
    observe.add_argument(
        "--time-limit",
        type=float,
        default=600.0,
        metavar="S",
        help="stop the replay after S seconds (default 600)",
    )
    observe.add_argument(
        "--request-timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="a request with no byte for S seconds is a timeout (default 60)",
    )
    observe.add_argument("--out", help="run folder (default runs/<scenario>-observed)")
    observe.add_argument("--force", action="store_true", help="replace the run in --out")
    observe.add_argument("--no-report", action="store_true", help="skip report.html")
    observe.add_argument("--quiet", action="store_true", help="no progress bar or table")
    add_scenario_options(observe)
    observe.set_defaults(handler=cmd_observe)

    serve = subparsers.add_parser(
        "serve", help="an OpenAI-compatible server: the engine over the real backend, live"
    )
    serve.add_argument("scenario", help="scenario YAML file (model, pool, scheduler, policies)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument(
        "--port",
        type=port,
        default=8000,
        help="port (default 8000; 0 picks a free one and prints it)",
    )
    serve.add_argument("--device", choices=("cpu", "cuda"), help="default: the scenario's")
    serve.add_argument(
        "--threads", type=positive_int, default=1, help="torch threads on the CPU (default 1)"
    )
    serve.add_argument("--model-name", help="the name /v1/models gives (default: the model's)")
    add_scenario_options(serve)
    serve.set_defaults(handler=cmd_serve)


def scenario_requests(scenario):
    """The scenario's request stream, exactly as a simulation of it draws it."""
    import numpy as np

    from sim.workload.generate import WorkloadError, generate_requests

    try:
        rng = np.random.default_rng(scenario.simulation.seed)
        return generate_requests(scenario, scenario.model, rng=rng)
    except WorkloadError as err:
        raise UsageError(f"{scenario.source}: {err.field}: {err}") from None


def _positive(**values) -> None:
    for name, value in values.items():
        if not value > 0 or value == float("inf"):
            raise UsageError(f"--{name.replace('_', '-')} must be a number > 0, got {value:g}")


def cmd_observe(args) -> int:
    import asyncio

    from sim.run.folders import FolderExists, check_target

    scenario = load(args.scenario, args.overrides, args.seed)
    _positive(
        max_connections=args.max_connections,
        time_limit=args.time_limit,
        request_timeout=args.request_timeout,
    )
    from sim.live.replay import ReplayOptions, api_url

    try:
        url = api_url(args.endpoint, args.api)
    except ValueError as err:
        raise UsageError(f"--endpoint: {err}") from None
    out = Path(args.out) if args.out else Path("runs") / f"{scenario.name}-observed"
    try:
        check_target(out, force=args.force)
    except (FolderExists, ValueError) as err:
        raise UsageError(str(err)) from None
    require("aiohttp", "observe")
    requests = scenario_requests(scenario)
    from sim.live.replay import check_reachable

    unreachable = asyncio.run(check_reachable(url, min(args.request_timeout, 10.0)))
    if unreachable:
        raise UsageError(f"--endpoint {args.endpoint}: {unreachable}; nothing was written")
    options = ReplayOptions(
        url=url,
        model=args.model or scenario.model.name,
        api=args.api,
        prompt_mode=args.prompt_mode,
        max_connections=args.max_connections,
        time_limit_s=args.time_limit,
        request_timeout_s=args.request_timeout,
    )
    return _observe(args, scenario, requests, options, out)


def _observe(args, scenario, requests, options, out: Path) -> int:
    from sim.live.observed import observed_summary, write_observed
    from sim.live.replay import replay
    from sim.output.benchmark import DEFAULT_PERCENTILES
    from sim.run.progress import Progress

    if not args.quiet:
        last = max((r.arrival_s for r in requests), default=0.0)
        print(
            f"replaying {len(requests)} requests over {last:.1f} s to {options.url} "
            f"(at most {options.max_connections} at once, time limit {options.time_limit_s:g} s)"
        )
    bar = Progress(len(requests), "observing", enabled=not args.quiet)
    try:
        result = replay(requests, options, on_done=bar.update)
    finally:
        bar.close()
    summary = observed_summary(
        scenario, requests, result.attempts, result, options, DEFAULT_PERCENTILES
    )
    write_observed(
        out,
        scenario,
        requests,
        result,
        summary,
        html=not args.no_report,
        force=args.force,
        argv=args.argv,
    )
    observed = summary["observed"]
    if not args.quiet:
        from sim.output.tables import format_summary_table

        print(format_summary_table(summary))
    errors = ", ".join(f"{kind}: {count}" for kind, count in observed["errors"].items())
    print(
        f"{observed['num_completed']} of {len(requests)} requests completed in "
        f"{result.wall_s:.1f} s; errors: {errors or 'none'}"
    )
    print(f"wrote {out}/" + ("summary.json" if args.no_report else "report.html"))
    _warn_if_uncalibratable(out)
    return 0


def _warn_if_uncalibratable(run: Path) -> None:
    """Say on stderr when ``calibrate --observed`` could not fit this run (too few
    requests ran alone: the endpoint was never idle long enough at this load)."""
    from sim.cli.observed import read_timings
    from sim.live.fit import lone_shortfall

    shortfall = lone_shortfall(read_timings(run))
    if shortfall:
        print(
            f"warning: {shortfall}, so calibrate --observed cannot fit this run: observe "
            "a load with idle gaps (a first stage at a low rate) or --max-connections 1",
            file=sys.stderr,
        )


def cmd_serve(args) -> int:
    overrides = list(args.overrides)
    if args.device:
        overrides.append(f"backend.device={args.device}")
    scenario = load(args.scenario, overrides, args.seed)
    for module in ("aiohttp", "prometheus_client", "torch"):
        require(module, "serve")
    from sim.config.errors import ScenarioError
    from sim.costs.measured import build_torch_executor
    from sim.live.driver import EngineDriver
    from sim.live.metrics import ServingMetrics
    from sim.live.server import Server

    name = args.model_name or scenario.model.name
    metrics = ServingMetrics(name, scenario.routing.replicas)
    server = Server(scenario, name, metrics)
    threads = args.threads

    def make_executor(scenario_, allocator):
        return build_torch_executor(scenario_, allocator, cpu_threads=threads)

    try:
        driver = EngineDriver(scenario, make_executor, server.publish, metrics)
    except ScenarioError as err:
        raise UsageError(str(err)) from None
    server.attach(driver)
    try:
        _serve(server, driver, args)
    finally:
        driver.stop()
    return _ended(driver)


def _serve(server, driver, args) -> None:
    import asyncio
    import signal

    from sim.live.server import serve

    device = server.scenario.backend.device

    def ready(host: str, bound: int) -> None:
        print(
            f"pagesim serve: listening on http://{host}:{bound} ({server.model_name} on "
            f"{device}, {server.scenario.routing.replicas} replica(s)); /metrics; "
            "Ctrl-C stops",
            flush=True,
        )

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, server.stopped.set)
        driver.start()
        await serve(server, args.host, args.port, ready)

    try:
        asyncio.run(main())
    except OSError as err:  # the address: in use, not this machine's, not permitted
        raise UsageError(
            f"--host {args.host} --port {args.port}: cannot listen there ({err.strerror or err})"
        ) from None


def _ended(driver) -> int:
    """Exit code after the server stopped: 0, or the engine's failure as one line (a
    plug-in that broke its contract) or a traceback (a bug)."""
    from sim.engine.policy_guard import PolicyFailure, StuckRun

    failure = driver.failure
    if failure is None:
        print("pagesim serve: stopped", flush=True)
        return 0
    if isinstance(failure, PolicyFailure | StuckRun):
        raise UsageError(f"{driver.scenario.source}: the engine stopped: {failure}")
    raise RuntimeError("the engine thread failed") from failure
