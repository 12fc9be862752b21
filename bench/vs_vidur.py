"""pagesim against Vidur on the same work: CPU time, wall, peak memory, interleaved.

    .venv/bin/python bench/vs_vidur.py [--rounds 2] \
        [--vidur-python PATH --vidur-src PATH [--vidur-data PATH] [--vidur-cache PATH]]

Runs ``bench/vs_vidur.yaml`` in pagesim, writes its request lengths as a Vidur trace,
then alternates pagesim and Vidur ``--rounds`` times (pagesim, Vidur, pagesim, Vidur...),
each in its own process, and prints per run and as medians:

- simulate CPU: pagesim's ``simulate()`` (workload generation, the event loop, the
  summary) against Vidur's event loop (``Simulator.run``; its requests are generated
  before, with the predictor's loading, in ``Simulator()``); both are
  ``time.process_time()`` inside the child;
- whole-process CPU (user + sys) and peak RSS, from ``wait4`` on the child;
- wall seconds and the 1-minute load average when the run started;
- the regime each reached (mean batch size, TPOT p50), which must agree before the
  costs are compared.

Without ``--vidur-python`` only the pagesim side runs. Vidur is microsoft/vidur's
``main`` (pure Python; the PyPI ``vidur`` 0.0.2x wheels are another code base that
downloads its profiles from the Hugging Face Hub). ``--vidur-src`` is a checkout (put on
the child's ``PYTHONPATH``), ``--vidur-data`` the folder holding ``profiling/``
(default: ``SRC/data``, through Vidur's own relative paths), ``--vidur-cache`` where
Vidur keeps its trained predictor (default: ``SRC/cache``). The first Vidur run trains
the predictor (minutes): run once with ``--rounds 1`` to warm it, then measure. See
bench/vs_vidur.md for the setup.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "bench" / "vs_vidur.yaml"
MARK = "VS_VIDUR_TIMES "

# Child code: times pagesim's simulate() in the process that runs the CLI.
PAGESIM_CHILD = """
import json, sys, time
import sim.run.runner as runner
from sim.cli import main
inner = runner.simulate
spent = {}
def timed(*args, **kwargs):
    start = time.process_time()
    result = inner(*args, **kwargs)
    spent["simulate_s"] = time.process_time() - start
    return result
runner.simulate = timed
code = main(["run", sys.argv[1], "--out", sys.argv[2], "--force", "--no-report", "--quiet"])
print(MARK + json.dumps(spent), flush=True)
sys.exit(code)
"""

# Child code: Vidur's main with its phases timed. Simulator() loads (or trains) the
# execution-time predictor and generates the requests; run() is the event loop alone;
# the metric files are written at exit (Vidur registers that with atexit).
VIDUR_CHILD = """
import json, time
from vidur.config import SimulationConfig
from vidur.simulator import Simulator
from vidur.utils.random import set_seeds
config = SimulationConfig.create_from_cli_args()
set_seeds(config.seed)
start = time.process_time()
simulator = Simulator(config)
built = time.process_time()
simulator.run()
print(MARK + json.dumps({
    "setup_s": built - start,
    "simulate_s": time.process_time() - built,
    "output_dir": config.metrics_config.output_dir,
}), flush=True)
"""


def vidur_args(trace: Path, data: Path | None, cache: Path, out: Path, *, lean: bool) -> list[str]:
    """Vidur's flags for the shape in bench/vs_vidur.yaml (see bench/vs_vidur.md).
    ``data=None`` keeps Vidur's own ``./data/profiling/...`` paths: they are part of the
    key its predictor cache is stored under, so the same paths reuse a trained cache.
    ``lean``: like `pagesim run --no-report`, no plots and no Chrome trace (which Vidur
    builds during the event loop); otherwise Vidur's default outputs."""
    rf = "--random_forrest_execution_time_predictor_config_"
    outputs = ["--no-metrics_config_enable_chrome_trace", "--no-metrics_config_store_plots"]
    return (
        [
            "--replica_config_device",
            "a100",
            "--replica_config_model_name",
            "meta-llama/Meta-Llama-3-8B",
            "--cluster_config_num_replicas",
            "1",
            "--replica_config_tensor_parallel_size",
            "1",
            "--replica_config_num_pipeline_stages",
            "1",
            "--request_generator_config_type",
            "synthetic",
            "--synthetic_request_generator_config_num_requests",
            "10000",
            "--length_generator_config_type",
            "trace",
            "--trace_request_length_generator_config_trace_file",
            str(trace),
            "--trace_request_length_generator_config_max_tokens",
            "8192",
            "--interval_generator_config_type",
            "poisson",
            "--poisson_request_interval_generator_config_qps",
            "20",
            "--replica_scheduler_config_type",
            "sarathi",
            "--sarathi_scheduler_config_batch_size_cap",
            "256",
            "--sarathi_scheduler_config_chunk_size",
            "4096",
            # Its defaults (128 sequences, 4,096 tokens) are below this shape's 256 and 6,208.
            f"{rf}prediction_max_batch_size",
            "256",
            f"{rf}prediction_max_tokens_per_request",
            "8192",
            # A smaller hyper-parameter grid than the default 27 points: training fits the
            # 2-core machine; a warm run loads the cached predictions either way.
            f"{rf}num_estimators",
            "250",
            f"{rf}max_depth",
            "16",
            "32",
            f"{rf}min_samples_split",
            "2",
            "5",
            "--metrics_config_cache_dir",
            str(cache),
            "--metrics_config_output_dir",
            str(out),
        ]
        + (outputs if lean else [])
        + (profile_args(rf, data) if data else [])
    )


def profile_args(rf: str, data: Path) -> list[str]:
    """Vidur's profile paths under ``data`` (it fills in the placeholders itself)."""
    compute, network = f"{data}/profiling/compute", f"{data}/profiling/network"
    return [
        f"{rf}compute_input_file",
        f"{compute}/{{DEVICE}}/{{MODEL}}/mlp.csv",
        f"{rf}attention_input_file",
        f"{compute}/{{DEVICE}}/{{MODEL}}/attention.csv",
        f"{rf}all_reduce_input_file",
        f"{network}/{{NETWORK_DEVICE}}/all_reduce.csv",
        f"{rf}send_recv_input_file",
        f"{network}/{{NETWORK_DEVICE}}/send_recv.csv",
    ]


def run_child(argv: list[str], *, cwd: Path, env: dict | None = None) -> dict:
    """Run one child to completion; its marker line plus rusage, wall and load."""
    load = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{argv[0]} exited {proc.returncode}:\n{out[-3000:]}")
    line = next(x for x in out.splitlines() if x.startswith(MARK))
    record = json.loads(line[len(MARK) :])
    record.update(
        cpu_s=usage.ru_utime + usage.ru_stime,
        peak_mib=usage.ru_maxrss / 1024,
        wall_s=wall,
        load1=load,
    )
    return record


def run_pagesim(root: Path, out: Path) -> dict:
    """One pagesim run of ``root``'s checkout (its code, this scenario)."""
    code = PAGESIM_CHILD.replace("MARK", repr(MARK))
    record = run_child([sys.executable, "-c", code, str(SCENARIO), str(out)], cwd=root)
    summary = json.loads((out / "summary.json").read_text())
    record.update(
        mean_batch=summary["mean_batch_size"],
        p50_batch=statistics.median(_column(out / "steps.csv", "batch_size")),
        tpot_p50_ms=1000 * summary["tpot_s"]["p50"],
    )
    return record


def write_trace(requests_csv: Path, trace: Path) -> None:
    """pagesim's request lengths as Vidur's trace (num_prefill_tokens,num_decode_tokens)."""
    with open(requests_csv, newline="") as src, open(trace, "w") as dst:
        dst.write("num_prefill_tokens,num_decode_tokens\n")
        for row in csv.DictReader(src):
            dst.write(f"{row['prompt_tokens']},{row['output_tokens']}\n")


def vidur_regime(output_dir: Path) -> dict:
    """Batch size over batches (mean and median from the 101 quantiles Vidur writes) and
    TPOT p50 (ms, over all requests) from Vidur's metric files."""
    quantiles = _column(output_dir / "plots" / "batch_size.csv", "batch_size")
    tpot = _column(
        output_dir / "request_metrics.csv", "decode_time_execution_plus_preemption_normalized"
    )
    return {
        "mean_batch": statistics.fmean(quantiles),
        "p50_batch": quantiles[len(quantiles) // 2],
        "tpot_p50_ms": 1000 * statistics.median(tpot),
    }


def _column(path: Path, name: str) -> list[float]:
    with open(path, newline="") as handle:
        return [float(row[name]) for row in csv.DictReader(handle) if row[name] != ""]


def run_vidur(args, trace: Path, out: Path, *, lean: bool) -> dict:
    src = Path(args.vidur_src).resolve()
    data = Path(args.vidur_data).resolve() if args.vidur_data else None
    cache = Path(args.vidur_cache).resolve() if args.vidur_cache else src / "cache"
    env = dict(os.environ, PYTHONPATH=str(src))
    argv = [args.vidur_python, "-c", VIDUR_CHILD.replace("MARK", repr(MARK))]
    record = run_child(argv + vidur_args(trace, data, cache, out, lean=lean), cwd=src, env=env)
    record.update(vidur_regime(Path(record["output_dir"])))
    return record


COLUMNS = [
    "simulate_s",
    "cpu_s",
    "wall_s",
    "peak_mib",
    "load1",
    "mean_batch",
    "p50_batch",
    "tpot_p50_ms",
]


def print_table(results: dict[str, list[dict]]) -> None:
    print(f"{'run':<12}" + "".join(f"{c:>12}" for c in COLUMNS))
    for name, runs in results.items():
        for i, rec in enumerate(runs):
            print(f"{name + ' ' + str(i + 1):<12}" + "".join(f"{rec[c]:>12.2f}" for c in COLUMNS))
    medians = {
        name: {c: statistics.median(r[c] for r in runs) for c in COLUMNS}
        for name, runs in results.items()
    }
    for name, med in medians.items():
        print(f"{name + ' med':<12}" + "".join(f"{med[c]:>12.2f}" for c in COLUMNS))
    p = medians["pagesim"]
    for name in (n for n in medians if n != "pagesim"):
        v = medians[name]
        print(
            f"{name} / pagesim (medians): "
            f"simulate CPU {v['simulate_s'] / p['simulate_s']:.1f}x, "
            f"process CPU {v['cpu_s'] / p['cpu_s']:.1f}x, "
            f"wall {v['wall_s'] / p['wall_s']:.1f}x, "
            f"peak RSS {v['peak_mib'] / p['peak_mib']:.1f}x; "
            f"{name} set-up (predictor load + requests): "
            f"{statistics.median(r['setup_s'] for r in results[name]):.2f} CPU s"
        )


def head_commit(root: Path) -> str:
    """``git log --oneline -1`` of a checkout, or '?' where it is none."""
    done = subprocess.run(
        ["git", "-C", str(root), "log", "--oneline", "-1"], capture_output=True, text=True
    )
    return done.stdout.strip()[:72] or "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--vidur-python", help="python of Vidur's own environment")
    parser.add_argument("--vidur-src", help="checkout of microsoft/vidur")
    parser.add_argument("--vidur-data", help="folder holding profiling/ (default SRC/data)")
    parser.add_argument("--vidur-cache", help="predictor cache (default SRC/cache)")
    parser.add_argument(
        "--vidur-outputs",
        choices=["lean", "default", "both"],
        default="lean",
        help="lean: no plots or Chrome trace (like --no-report); default: Vidur's own",
    )
    parser.add_argument("--pagesim-root", default=str(ROOT), help="pagesim checkout to run")
    parser.add_argument("--work", help="folder for runs and the trace (default: a temp dir)")
    args = parser.parse_args()
    if bool(args.vidur_python) != bool(args.vidur_src):
        parser.error("--vidur-python and --vidur-src go together")
    work = Path(args.work or tempfile.mkdtemp(prefix="vs-vidur-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict]] = {"pagesim": []}
    trace = work / "vidur_trace.csv"
    modes = {"lean": [True], "default": [False], "both": [True, False]}[args.vidur_outputs]
    vidurs = {("vidur" if lean else "vidur-dflt"): lean for lean in modes}
    if args.vidur_python:
        results.update({name: [] for name in vidurs})
    commit = head_commit(Path(args.pagesim_root))  # before: it may move while this runs
    for round_ in range(args.rounds):
        results["pagesim"].append(run_pagesim(Path(args.pagesim_root).resolve(), work / "pagesim"))
        if round_ == 0:
            write_trace(work / "pagesim" / "requests.csv", trace)
        for name, lean in vidurs.items() if args.vidur_python else ():
            results[name].append(run_vidur(args, trace, work / name, lean=lean))
    print(f"work folder: {work}")
    print(f"pagesim checkout: {args.pagesim_root} at {commit}")
    print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
