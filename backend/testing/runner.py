"""Running the allocator state machine outside pytest, as ``pagesim check-allocator``
does: a verdict, the counts of what was exercised, and on failure Hypothesis' shrunk
example as the calls that break the allocator.
"""

from __future__ import annotations

import contextlib
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, Phase, Verbosity, seed
from hypothesis import settings as Settings
from hypothesis.reporting import with_reporter
from hypothesis.stateful import run_state_machine_as_test

from backend.base import AllocatorFactory
from backend.connectors.offload import OffloadConnector
from backend.connectors.peer import PeerConnector
from backend.testing.harness import supports_prefix_caching
from backend.testing.machine import AllocatorStateMachine
from backend.testing.plugin_guard import PluginStopped, guarded_factory, watching


@dataclass
class CheckResult:
    """What :func:`check_allocator` found."""

    passed: bool
    #: runs (allocators built) and calls checked, and counts of what they exercised
    #: (prefix hits, swaps, refused calls...): see backend.testing.harness.STAT_NAMES
    stats: dict[str, int]
    #: the shrunk failing example, one call per line (empty when it passed)
    example: list[str] = field(default_factory=list)
    #: the failure's last line, ``Type: message`` (empty when it passed)
    error: str = ""


def check_allocator(
    factory: AllocatorFactory,
    *,
    examples: int = 200,
    seed_value: int = 0,
    steps: int = 40,
    prefix_caching: bool | None = None,
    name: str = "",
    on_progress: Callable[[int], None] | None = None,
    connector: type[OffloadConnector] = OffloadConnector,
    peer: type[PeerConnector] = PeerConnector,
) -> CheckResult:
    """Run the allocator state machine on the allocators ``factory`` builds: up to
    ``examples`` examples of up to ``steps`` calls each, drawn from ``seed_value`` (the
    same seed gives the same run). A failure is shrunk to a minimal example. The
    Hypothesis example database is not used, so nothing is written anywhere.
    ``on_progress(allocators built so far)`` is called about twice a second while it
    runs (a progress bar). ``connector``: the offload tiers built beside an allocator
    that takes a connector (a broken one, to test the checker); ``peer``: the peer
    connector of prefill/decode hand-offs (likewise)."""
    guarded = guarded_factory(factory)
    try:
        if prefix_caching is None:
            with watching():
                prefix_caching = supports_prefix_caching(guarded)
    except PluginStopped as err:
        return CheckResult(False, {"runs": 0, "calls": 0}, [], f"PluginStopped: {err}")
    machine = AllocatorStateMachine.for_factory(
        guarded,
        prefix_caching=prefix_caching,
        name=name or f"Check{getattr(factory, '__name__', 'Allocator')}",
        connector=connector,
        peer=peer,
    )
    config = Settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        derandomize=False,
        print_blob=False,
        report_multiple_bugs=False,
        verbosity=Verbosity.normal,
        suppress_health_check=list(HealthCheck),
        # no explain phase: it would annotate the example, and take most of the time
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    )

    def build():
        return machine()

    done = threading.Event()
    if on_progress is not None:
        args = (machine.stats, on_progress, done)
        threading.Thread(target=_report, args=args, daemon=True).start()
    try:
        with with_reporter(lambda text: None), watching():  # the example is on the exception
            run_state_machine_as_test(seed(seed_value)(build), settings=config)
    except PluginStopped as err:  # a hang or an exit: no example to shrink
        return CheckResult(False, dict(machine.stats), [], f"PluginStopped: {err}")
    except Exception as err:  # the allocator's failure, whatever it raised
        message = str(err).strip().splitlines()
        error = f"{type(err).__name__}: {message[-1]}" if message else type(err).__name__
        if not isinstance(err, AssertionError):  # (a check's verdict says what broke)
            error += f" ({origin(err)})"
        return CheckResult(False, dict(machine.stats), example_calls(err), error)
    finally:
        done.set()
    return CheckResult(True, dict(machine.stats))


def _report(stats: dict, on_progress: Callable[[int], None], done: threading.Event) -> None:
    """Call ``on_progress`` with the allocators built so far until ``done``."""
    while not done.wait(0.5):
        on_progress(stats["runs"])


def origin(err: BaseException) -> str:
    """Where ``err`` was raised, as ``raised by the allocator at FILE:LINE in FUNCTION``
    (FILE relative to the working directory when under it), or ``in the checker`` when
    the innermost frame is this package's own code."""
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return "raised by the allocator"
    frame = frames[-1]
    where = Path(frame.filename)
    here = Path(__file__).resolve().parent
    by = "in the checker" if where.resolve().is_relative_to(here) else "by the allocator"
    with contextlib.suppress(ValueError):
        where = where.resolve().relative_to(Path.cwd())
    return f"raised {by} at {where}:{frame.lineno} in {frame.name}"


def example_calls(err: BaseException) -> list[str]:
    """The calls of the shrunk example Hypothesis attached to ``err`` (its notes), without
    the invariant checks it lists after every step."""
    notes = getattr(err, "__notes__", [])
    calls = [line for line in notes if line.startswith(("state", "seq_"))]
    return [line for line in calls if not line.endswith(".the_contract_holds()")]
