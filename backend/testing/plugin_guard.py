"""The checker's boundary with an allocator it did not write: every call into one runs
under a time limit, and a call that hangs or exits the process stops the whole check
with the reason (a hang cannot be shrunk, and ``sys.exit`` in a plug-in must not end the
command that checks it). An exception the allocator raises is not this module's: the
state machine judges it.

The time limit is a watchdog thread, not a timer per call: a call only notes when it
started (a check makes tens of thousands), and the watchdog, polling a few times a
second, interrupts the main thread with SIGALRM when one has run too long."""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

#: Seconds one call into the allocator (its constructor included) may take.
CALL_LIMIT_S = 10.0


class PluginStopped(BaseException):
    """The allocator hung or tried to exit: the check ends here. A BaseException, so
    Hypothesis does not take it for a failing example to shrink."""


class _Calls:
    """The call in progress (what, and when it must have returned), read by the
    watchdog; None between calls."""

    current: tuple[str, float] | None = None
    expired: str = ""


def guarded_factory(factory: Callable[..., Any], limit_s: float | None = None):
    """``factory`` whose allocators have every public method guarded (instance
    attributes shadow the class's, so ``isinstance`` and properties are untouched);
    ``limit_s`` None: :data:`CALL_LIMIT_S` as it is when the factory is wrapped. The
    limit holds inside :func:`watching`."""
    limit_s = CALL_LIMIT_S if limit_s is None else limit_s

    @functools.wraps(factory)
    def build(*args, **kwargs):
        allocator = _call(factory, "the constructor", limit_s, *args, **kwargs)
        for name in dir(type(allocator)):
            if name.startswith("_"):
                continue
            method = getattr(allocator, name, None)
            if callable(method) and not isinstance(method, type):
                setattr(allocator, name, _guarded(method, f"{name}()", limit_s))
        return allocator

    for attribute in (
        "supports_prefix_caching",
        "supports_kv_connector",
        "supports_kv_groups",
        "block_table_layout",
    ):
        if hasattr(factory, attribute):
            setattr(build, attribute, getattr(factory, attribute))
    return build


def _guarded(method: Callable, what: str, limit_s: float) -> Callable:
    @functools.wraps(method)
    def call(*args, **kwargs):
        return _call(method, what, limit_s, *args, **kwargs)

    return call


def _call(function: Callable, what: str, limit_s: float, *args, **kwargs):
    outer = _Calls.current  # a guarded method may call another: keep the outer deadline
    if outer is None:
        _Calls.current = (f"{what} did not return within {limit_s:g} s", time.monotonic() + limit_s)
    try:
        return function(*args, **kwargs)
    except SystemExit as err:
        raise PluginStopped(f"{what} called sys.exit({err.code!r})") from None
    finally:
        if outer is None:
            _Calls.current = None


@contextlib.contextmanager
def watching(poll_s: float = 0.1) -> Iterator[None]:
    """Enforce the guarded calls' time limits while the body runs (main thread only;
    elsewhere the calls run without one)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    main = threading.main_thread().ident
    done = threading.Event()

    def expire(signum, frame):
        raise PluginStopped(_Calls.expired)

    def watch():
        while not done.wait(poll_s):
            current = _Calls.current
            if current is not None and time.monotonic() > current[1]:
                _Calls.expired = current[0]
                signal.pthread_kill(main, signal.SIGALRM)
                return

    previous = signal.signal(signal.SIGALRM, expire)
    watchdog = threading.Thread(target=watch, daemon=True)
    watchdog.start()
    try:
        yield
    finally:
        done.set()
        watchdog.join()
        signal.signal(signal.SIGALRM, previous)
        _Calls.current = None
