"""The one kind every user mistake is: a file, a field or an option that is not what a
command needs. Each reader raises its own subclass (ScenarioError, TraceError,
RecordError, ...) with a one-line message naming the file, the field and what was
expected; ``sim.cli.common.dispatch`` turns any of them into that line and exit code 2,
so a command cannot forget one. Anything else is a bug and raises loudly."""

from __future__ import annotations


class UserError(Exception):
    """A mistake in what the user gave; ``str(err)`` is the one line to print."""
