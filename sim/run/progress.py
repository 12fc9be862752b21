"""Progress of long phases (simulating, profiling, writing), on stderr, never in outputs.

A tqdm bar with rate and ETA on a terminal; elsewhere (CI, a log file) one plain line
every ``LOG_INTERVAL_S`` seconds and at the end, so a long run is never silent and a
log holds no carriage-return noise.
"""

from __future__ import annotations

import sys
from concurrent.futures import as_completed
from typing import TextIO

from tqdm import tqdm

#: Seconds between progress lines when stderr is not a terminal.
LOG_INTERVAL_S = 5.0


class _Lines:
    """A stream for tqdm that turns its in-place redraws into whole lines."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> None:
        text = text.replace("\r", "").strip()
        if text:
            self.stream.write(text + "\n")

    def flush(self) -> None:
        self.stream.flush()


def stderr_bar(total: int, label: str, unit: str, **options) -> tqdm:
    """The tqdm bar on stderr that every progress display here uses: redrawn in place on
    a terminal, whole lines every ``LOG_INTERVAL_S`` seconds elsewhere. ``options`` go
    to tqdm as they are (``unit_scale``, ``initial``, ``postfix``)."""
    stream = sys.stderr
    terminal = stream.isatty()
    return tqdm(
        total=max(total, 1),
        desc=label,
        unit=unit,
        file=stream if terminal else _Lines(stream),
        mininterval=0.5 if terminal else LOG_INTERVAL_S,
        maxinterval=LOG_INTERVAL_S,
        dynamic_ncols=terminal,
        ascii=not terminal,
        leave=True,
        **options,
    )


class Progress:
    """``update(done)`` with the count done so far; ``close()`` when finished. Disabled,
    it does nothing."""

    def __init__(self, total: int, label: str, *, enabled: bool = True, unit: str = "req"):
        self._bar = None
        if enabled:
            scale = total >= 10_000  # 12.0k req; small counts stay whole
            self._bar = stderr_bar(total, label, unit, unit_scale=scale)

    def update(self, done: int) -> None:
        if self._bar is not None and done > self._bar.n:
            self._bar.update(done - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def map_with_progress(pool, fn, *iterables, label: str, unit: str) -> list:
    """``list(pool.map(fn, *iterables))`` on an executor ``pool``, with a bar of the
    calls done on stderr (a bench's cases, say): the results in the calls' order."""
    futures = [pool.submit(fn, *args) for args in zip(*iterables, strict=True)]
    bar = Progress(len(futures), label, unit=unit)
    try:
        for done, _ in enumerate(as_completed(futures), 1):
            bar.update(done)
    finally:
        bar.close()
    return [future.result() for future in futures]
