"""``pagesim capacity`` (sim.sweep.capacity): input checked whole before any run, then the
searches, then capacity.csv, probes.csv, capacity.json and capacity.html."""

from __future__ import annotations

from pathlib import Path

from sim.cli.common import UsageError, executor_for, out_folder

CAPACITY_JSON = "capacity.json"


def run_capacity_command(args) -> int:
    from sim.config.errors import ScenarioError
    from sim.sweep.capacity import CapacityPlan, probe_rows, results, run_capacity
    from sim.sweep.executors import ExecutorError
    from sim.sweep.points import csv_text
    from sim.sweep.slo import parse_bound
    from sim.sweep.store import provenance, write_json, write_text

    try:
        bounds = [parse_bound(text) for text in args.slo]
    except ValueError as err:
        raise UsageError(str(err)) from None
    prices = _prices(args.price)
    common = list(args.overrides)
    if args.seed is not None:
        common.append(f"simulation.seed={args.seed}")
    try:
        plan = CapacityPlan(Path(args.scenario), common, args.vary, bounds, args.tolerance)
    except ScenarioError as err:
        raise UsageError(str(err)) from None
    out = out_folder(args, CAPACITY_JSON, "search", plan.resolved())
    try:
        with executor_for(args) as executor:
            out.mkdir(parents=True, exist_ok=True)
            meta = {"search": plan.resolved(), **provenance(args.argv, executor)}
            write_json(out / CAPACITY_JSON, {**meta, "status": "running"})
            if args.reports:  # each probe's report loads it from here
                from sim.output.page import plotly_script_src

                plotly_script_src(out / "capacity.html")
            run_capacity(plan, out, executor, html=args.reports, progress=not args.quiet)
    # ScenarioError here: a probe's scenario (a rate its settings cannot take)
    except (ExecutorError, ScenarioError) as err:
        raise UsageError(str(err)) from None
    rows = results(plan, prices)
    probes = probe_rows(plan)
    keys = [k for k, _ in plan.vary]
    write_text(out / "capacity.csv", csv_text(rows, ["config", *keys, "capacity_rps"]))
    write_text(out / "probes.csv", csv_text(probes, ["config", "rate_rps", "passed"]))
    write_json(
        out / CAPACITY_JSON, {**meta, "status": "done", "configurations": rows, "probes": probes}
    )
    from sim.sweep.capacity_page import write_capacity_page

    write_capacity_page(out / "capacity.html", plan, rows)
    if not args.quiet:
        from sim.sweep.tables import capacity_table

        print(capacity_table(rows, keys))
    for row in rows:  # what stopped a search, even with --quiet
        if row["error"]:
            print(f"configuration {row['config']} failed: {row['error']}")
    print(f"wrote {out}/capacity.csv and {out}/capacity.html")
    return 1 if any(row["error"] for row in rows) else 0


def _prices(assignments) -> dict[str, float]:
    prices = {}
    for text in assignments:
        name, sep, value = text.partition("=")
        try:
            usd = float(value)
        except ValueError:
            usd = -1.0
        if not sep or not name.strip() or not usd > 0:
            raise UsageError(f"--price {text}: expected HARDWARE=USD with USD > 0 per GPU-hour")
        prices[name.strip()] = usd
    return prices
