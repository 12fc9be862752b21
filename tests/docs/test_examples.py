"""Every command README.md and docs/ show is accounted for here, and run: as printed, in
a reduced form (fewer requests, a looser tolerance) where the printed one is long, or in
the ``nightly`` profile where even a reduced form is a benchmark; the few that cannot run
in a test (they download vLLM, or need a vLLM source tree or an old commit beside the
checkout) are listed with the reason. A new command in the docs without a rule fails
``test_every_documented_command_has_a_rule``.

The commands run in order, page by page, in one folder that holds the checkout's inputs
(scenarios, validation data, tests, bench, the Makefile and .venv, by symlink) and the
stand-in files a page's command names but a checkout lacks (a recorded run to import);
``runs/`` there is the commands' own, so a later command reads what an earlier one wrote,
as a reader following the page would."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docs.examples import ROOT, Example, all_examples

NIGHTLY = os.environ.get("HYPOTHESIS_PROFILE") == "nightly"


@dataclass(frozen=True)
class Rule:
    pattern: str  # a regex searched in the command
    kind: str  # "run", "reduced", "background", "nightly" or "elsewhere"
    why: str = ""  # what is reduced, or why it runs elsewhere
    edit: tuple[tuple[str, str], ...] = ()  # regex substitutions making the reduced form
    exit: int = 0  # the exit code the page says it ends with
    output: bool = False  # check the output the page shows (simulated figures: exact)


def fewer(n: int) -> tuple[tuple[str, str], ...]:
    """Each ``pagesim run|sweep|capacity`` line (and ``python -m sim.cli run``) asks for
    ``n`` requests (and no warm-up beyond them)."""
    sets = f"--set simulation.num_requests={n} --set simulation.warmup_requests=0"
    return ((r"((?:pagesim|sim\.cli) (?:run|sweep|capacity) [^\n;]*)", rf"\1 {sets}"),)


def make_recipe(target: str) -> str:
    """The command a Makefile target runs after its setup step, ``$(BIN)`` spelt out:
    the test runs that, never the setup (it would reinstall the shared .venv)."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(rf"^{target}: .*\n\t(.+)$", makefile, re.M)[1]
    return recipe.replace("$(BIN)", ".venv/bin")


RULES = (
    Rule(
        r"^make run$",
        "reduced",
        "the recipe without its setup step (the venv exists)",
        ((r"^make run$", make_recipe("run")),),
        output=True,
    ),
    Rule(r"^make test$", "elsewhere", "it is the command that runs this test"),
    Rule(r"^make parity", "elsewhere", "it installs vLLM into its own venv (a download)"),
    Rule(
        r"^git worktree add|--root \.\./before",
        "elsewhere",
        "a side-by-side bench against old commits checked out beside the checkout",
    ),
    Rule(r"vs_vllm_block_pool\.py --vllm-src PATH", "elsewhere", "needs a vLLM source tree"),
    Rule(
        r"pip install pyarrow|costmodel_vs_aiconfigurator\.py AIC/",
        "elsewhere",
        "needs aiconfigurator's measured tables (not shipped) and pyarrow (a download)",
    ),
    Rule(r"^HYPOTHESIS_PROFILE=nightly", "nightly", "the long property-test run"),
    Rule(
        r"bench/(allocator|trace_export|costmodel_vs_profiles|recorded_runs|parity/compare|"
        r"offload_tiers)\.py",
        "nightly",
        "a benchmark (minutes)",
    ),
    Rule(r"bench/costmodels_on_run\.py", "run", output=True),
    Rule(r"bench/serve_load\.py", "run"),  # its figures are timings: checked by its own test
    Rule(
        r"num_requests=100000",
        "reduced",
        "2,000 requests",
        (("num_requests=100000", "num_requests=2000"),),
    ),
    Rule(r"pagesim serve ", "background", "a server, stopped when its page is done"),
    Rule(r"^until ", "run"),  # waits for the server started just before
    Rule(r"pagesim sweep scenarios/tiny\.yaml", "run"),
    Rule(r"^pagesim (sweep|capacity) .*--jobs 2", "run", output=True),  # the shown tables
    Rule(
        r"pagesim (sweep|capacity) ",
        "reduced",
        "200 requests a point, tolerance 0.5",
        fewer(200)
        + ((r"--tolerance \S+", ""), (r"(pagesim capacity [^\n]*)", r"\1 --tolerance 0.5")),
    ),
    # runs whose figures a page shows: as printed (a few seconds each)
    Rule(
        r"pagesim run scenarios/policies/(eviction|preemption|scheduling|offload)",
        "run",
        output=True,
    ),
    Rule(r"pagesim run scenarios/(tiny\.yaml|policies/|disaggregated\.yaml)", "run"),
    Rule(
        r"paged-vs-contiguous|--out runs/a100-|batching|rate_rps=40 --out runs/default-40",
        "run",
        output=True,
    ),
    Rule(r"pagesim run ", "reduced", "400 requests", fewer(400)),
    Rule(
        r"pagesim calibrate --observed runs/a ",
        "reduced",
        "3 fit evaluations",
        ((r"$", " --max-evaluations 3"),),
    ),
    Rule(r"check-allocator tests/backend/broken_allocators\.py", "run", exit=1, output=True),
    Rule(r"pagesim (compare|check-allocator) ", "run", output=True),
    Rule(r"pagesim (validate|list|init|import-run|observe|calibrate|profile) ", "run"),
    Rule(r"pytest -q tests/policies/test_custom_policy\.py", "run"),
    Rule(r"^for p in fcfs priority; do \.venv/bin/python -c", "run", output=True),
    Rule(r"python -c ", "run", output=True),
)

EXAMPLES = all_examples()


def rule_of(example: Example) -> Rule | None:
    return next((r for r in RULES if re.search(r.pattern, example.command, re.M)), None)


def test_every_documented_command_has_a_rule():
    missing = [f"{e.page}:{e.line}: {e.command}" for e in EXAMPLES if rule_of(e) is None]
    assert not missing, "\n".join(missing)


def test_what_runs_elsewhere_is_short_and_named():
    """Only what cannot run in a test is left to elsewhere, each with its reason."""
    elsewhere = [e for e in EXAMPLES if rule_of(e).kind == "elsewhere"]
    assert all(rule_of(e).why for e in elsewhere)
    assert len(elsewhere) <= 8, [e.command for e in elsewhere]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The reader's folder: the checkout's inputs by symlink, stand-ins for the files the
    docs' import commands name; servers started in it are stopped at the end."""
    work = tmp_path_factory.mktemp("docs")
    for name in (
        "scenarios",
        "validation",
        "tests",
        "bench",
        "backend",
        "sim",
        "policies",
        ".venv",
        "Makefile",
        "pyproject.toml",
    ):
        (work / name).symlink_to(ROOT / name)
    _stand_ins(work)
    servers: list[subprocess.Popen] = []
    yield work, servers
    stop(servers)


def _stand_ins(work: Path) -> None:
    """A recorded run of each format the import commands read, and four recorded runs of
    one GPU for ``calibrate --observed runs/a runs/b runs/c --holdout runs/d``."""
    from tests.recorded.fixtures import inference_perf_folder, lifecycle_folder, vllm_bench

    inference_perf_folder(work / "reports")
    (work / "engine.yaml").write_text("max_num_seqs: 64\nenable_prefix_caching: true\n")
    lifecycle_folder(work / "vllm")
    vllm_bench(work / "result.json")
    runs = work / "runs"
    runs.mkdir()
    corpus = ROOT / "validation" / "recorded" / "runs"
    two = ("rtx4090-llama-3.1-8b", "rtx4090-llama-3.1-8b-seqs128")
    for name, run in zip("abcd", two + two):
        shutil.copytree(corpus / run, runs / name)


def command_of(example: Example, rule: Rule) -> str:
    command = example.command
    for pattern, replacement in rule.edit:
        command = re.sub(pattern, replacement, command, flags=re.M)
    return command


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"{e.page}:{e.line}" for e in EXAMPLES])
def test_the_documented_command_works(example, workdir):
    work, servers = workdir
    rule = rule_of(example)
    if rule is None or rule.kind == "elsewhere":
        pytest.skip(f"runs elsewhere: {rule.why if rule else 'no rule'}")
    if rule.kind == "nightly" and not NIGHTLY:
        pytest.skip(f"nightly profile only: {rule.why}")
    printed = run_example(example, rule, work, servers)
    if rule.output and example.output:
        missing = missing_lines(example.output, printed)
        assert not missing, (
            f"{example.page}:{example.line}: shown but not printed (python -m "
            f"tests.docs.regenerate rewrites it):\n"
            + "\n".join(missing)
            + "\n--- printed:\n"
            + printed[-4000:]
        )


def run_example(example: Example, rule: Rule, work: Path, servers: list) -> str:
    """Run ``example`` in ``work`` (a server in the background); its stdout. Raises
    AssertionError for an exit code other than the page's, or a traceback."""
    command = command_of(example, rule)
    env = {**os.environ, "PATH": f"{work / '.venv' / 'bin'}:{os.environ['PATH']}"}
    if rule.kind != "nightly":
        env.pop("HYPOTHESIS_PROFILE", None)
    if rule.kind == "background":
        server = subprocess.Popen(
            ["bash", "-c", command.rstrip("& ")],
            cwd=work,
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        servers.append(server)
        _wait_for_health(command)
        return ""
    before = set(os.listdir(work))
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", command],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == rule.exit, (
        f"{example.page}:{example.line}: exit {done.returncode}\n$ {command}\n"
        f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    )
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    # A reader's commands run in their checkout: outputs go under runs/, not beside
    # the Makefile (a file written there would sit among the project's own).
    written = set(os.listdir(work)) - before - READER_FILES
    assert not written, (
        f"{example.page}:{example.line}: wrote {sorted(written)} beside the Makefile"
    )
    return done.stdout


#: What a page's commands may create at the top of the reader's folder: run folders, the
#: docs site, the JSON schema an editor is pointed at, the starter scenario ``pagesim
#: init`` writes where the reader is (its purpose), the example database Hypothesis keeps
#: for check-allocator (it replays a failure found before) and pytest's cache where a
#: page runs a test (both ignored by git).
READER_FILES = {
    "runs",
    "site",
    "pagesim.schema.json",
    "my-scenario.yaml",
    ".hypothesis",
    ".pytest_cache",
}


def stop(servers: list) -> None:
    for server in servers:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def missing_lines(shown: str, printed: str) -> list[str]:
    """Lines of ``shown`` that ``printed`` has no line of (word for word, spacing aside).
    A shown line in parentheses is the page's note, not output."""
    printed_lines = {tuple(line.split()) for line in printed.splitlines()}
    return [
        line
        for line in shown.splitlines()
        if line.strip()
        and not line.lstrip().startswith("(")
        and tuple(line.split()) not in printed_lines
    ]


def _wait_for_health(command: str) -> None:
    import time
    import urllib.request

    port = re.search(r"--port (\d+)", command)[1]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"{command}: no answer on port {port} within 60 s")
