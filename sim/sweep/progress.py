"""Progress across points, on stderr: done / running / failed (and how many a resumed
sweep found already done), with tqdm's rate and ETA. A bar on a terminal; elsewhere a
plain line every few seconds (sim.run.progress's convention), never in any output file.
"""

from __future__ import annotations

from sim.run.progress import stderr_bar


class SweepProgress:
    """``started(n)``, ``finished(ok)``, ``close()``; disabled, it does nothing."""

    def __init__(
        self, total: int, reused: int, workers: int, *, label: str = "sweep", enabled: bool = True
    ):
        self.workers = workers
        self.reused = reused
        self.in_flight = 0
        self.failed = 0
        self._bar = None
        if enabled:
            self._bar = stderr_bar(total, label, "point", initial=reused, postfix=self._text())

    def started(self, count: int) -> None:
        self.in_flight += count
        self._postfix()

    def finished(self, ok: bool) -> None:
        self.in_flight -= 1
        self.failed += not ok
        if self._bar is not None:
            self._postfix(refresh=False)
            self._bar.update(1)

    def _postfix(self, refresh: bool = True) -> None:
        if self._bar is None:
            return
        self._bar.set_postfix_str(self._text(), refresh=refresh)

    def _text(self) -> str:
        text = f"running {min(self.in_flight, self.workers)}, failed {self.failed}"
        return text + (f", already done {self.reused}" if self.reused else "")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
