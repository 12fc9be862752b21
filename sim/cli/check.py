"""``pagesim check-allocator``: pagesim's allocator state machine (backend.testing) run
against a user's allocator class, or a shipped one by name.

Exit code 0: it passed; 1: it failed (the shrunk example is printed); 2: a usage error
(a spec that does not load, a class that is not an Allocator or cannot be built, no
hypothesis installed), as one line.
"""

from __future__ import annotations

import argparse
import sys

from sim.cli.common import UsageError, require

__all__ = ["add_check_command", "cmd_check_allocator"]

DESCRIPTION = """\
Run pagesim's allocator state machine against an allocator: random sequences of
allocate, mark_computed, append, append_batch, fork, free, swap_out/swap_in and misuse
on tiny pools, checking after every call the allocator's own check_invariants, that
refused calls and queries change nothing, that every sequence reads back its tokens
and its KV through its block table (copy-on-write, swap round trips), that prefix hits
are legitimate and stay within a tenant's salt (when the class supports prefix caching)
and that usage() adds up with no leak. A failure is shrunk to a minimal example.

ALLOCATOR is module:Class or path/file.py:Class (an Allocator subclass of
backend.base), or a shipped allocator: paged, contiguous-max, contiguous-pow2,
contiguous-oracle. The class is built with keyword arguments

    Class(num_blocks=N, block_size=B, num_cpu_blocks=C, enable_prefix_caching=P)

(N device blocks of B token slots; C CPU swap blocks, 0 for none; P is True only if the
class sets supports_prefix_caching = True). A region-layout class (block_table_layout
= "region", block_size 1) gets N * B slots. Needs hypothesis (the 'test' extra).

exit codes: 0 passed, 1 the allocator failed, 2 usage error"""


def add_check_command(subparsers) -> None:
    """Register ``check-allocator`` on an argparse subparsers object. Mutates it."""
    cmd = subparsers.add_parser(
        "check-allocator",
        help="run pagesim's allocator state machine against an allocator class",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cmd.add_argument("allocator", help="module:Class, path/file.py:Class or a shipped name")
    cmd.add_argument(
        "--examples", type=int, default=200, help="allocators to build and drive (default 200)"
    )
    cmd.add_argument("--steps", type=int, default=40, help="most calls per example (default 40)")
    cmd.add_argument("--seed", type=int, default=0, help="the same seed, the same run (default 0)")
    cmd.set_defaults(handler=cmd_check_allocator)


def cmd_check_allocator(args) -> int:
    if args.examples < 1 or args.steps < 1:
        raise UsageError("--examples and --steps must be at least 1")
    require("hypothesis", "check-allocator")
    from backend.testing import check_allocator
    from backend.testing.factories import SHIPPED
    from sim.run.progress import Progress

    spec = args.allocator
    factory = SHIPPED.get(spec) or _user_class(spec)
    # (a bar on a terminal only: a log or a test's captured stderr keeps just the verdict)
    bar = Progress(args.examples, "checking", enabled=sys.stderr.isatty(), unit="example")
    try:
        result = check_allocator(
            factory,
            examples=args.examples,
            seed_value=args.seed,
            steps=args.steps,
            on_progress=bar.update,
        )
    finally:
        bar.close()
    stats = result.stats
    runs = f"{stats['runs']:,} allocators driven through {stats['calls']:,} calls"
    if result.passed:
        print(f"PASS {spec} (seed {args.seed}): {runs}")
        print("  exercised: " + _exercised(stats))
        return 0
    if not result.example:  # it hung or tried to exit: nothing to shrink
        print(f"FAIL {spec} (seed {args.seed}, after {runs}): {result.error}")
        return 1
    print(f"FAIL {spec} (seed {args.seed}, after {runs}); a minimal failing example:")
    for line in result.example:
        print(f"    {line}")
    print(result.error)
    return 1


def _user_class(spec: str):
    """The Allocator subclass ``spec`` names, checked to build with the factory
    arguments; UsageError (one line) otherwise."""
    from sim.config.allocators import PLUGIN_FORMS, SHIPPED, construct, load_allocator_class

    if ":" not in spec:
        shipped = ", ".join(SHIPPED)
        raise UsageError(f"{spec}: expected {PLUGIN_FORMS}, or one of {shipped}")
    from backend.testing.plugin_guard import PluginStopped, guarded_factory, watching

    try:
        cls = load_allocator_class(spec)
        with watching():
            construct(
                guarded_factory(cls),
                num_blocks=8,
                block_size=2,
                num_cpu_blocks=2,
                enable_prefix_caching=bool(cls.supports_prefix_caching),
            )
    except ValueError as err:
        raise UsageError(str(err)) from None
    except PluginStopped as err:
        raise UsageError(f"{spec}: {err}") from None
    return cls


def _exercised(stats: dict[str, int]) -> str:
    shown = [(name, n) for name, n in stats.items() if name not in ("runs", "calls")]
    return ", ".join(f"{name} {n:,}" for name, n in shown)
