"""The boundary between the engine and the policies it runs: what a policy returned is
checked where the engine uses it, and a policy (or cost model) that breaks its contract
stops the run with :class:`PolicyFailure` naming the role, the hook and what was wrong.

The engine raises it without knowing the policy's name or the simulated time; the
runner adds both (``located``) and the command line prints one line. User plug-ins are
also wrapped whole (:func:`guarded`), so an exception inside one is reported the same
way; the shipped policies are not wrapped (an exception in them is a bug, and it
raises with its traceback).
"""

from __future__ import annotations

import functools
import math
from typing import Any


class PolicyFailure(Exception):
    """A policy or cost model broke its contract; the run cannot go on."""

    def __init__(self, role: str, hook: str, problem: str):
        # The args rebuild the exception: SimPy re-raises a process's exception as
        # ``type(err)(*err.args)``.
        super().__init__(role, hook, problem)
        self.role, self.hook, self.problem = role, hook, problem
        self.where = ""

    def located(self, name: str, now: float) -> PolicyFailure:
        """Say which plug-in and when (``name`` as the scenario gives it)."""
        self.where = f"{self.role} {name!r}: {self.hook} at t={now:.6g} s: {self.problem}"
        return self

    def __str__(self) -> str:
        return self.where or f"{self.role}: {self.hook}: {self.problem}"


class StuckRun(Exception):
    """The simulation stopped making progress (see :data:`MAX_IDLE_STEPS`)."""


#: Steps in a row that compute no token (only block moves) before a replica is stuck.
MAX_IDLE_STEPS = 10_000


def brief(value: Any, limit: int = 60) -> str:
    """``value`` for a one-line message: its repr on one line, cut to ``limit``."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else f"{text[: limit - 3]}... ({type(value).__name__})"


def check_duration(seconds: Any) -> float:
    """A step time from an executor: a finite number >= 0, else PolicyFailure."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise PolicyFailure("cost model", "execute()", f"returned {brief(seconds)}, not seconds")
    if not math.isfinite(seconds) or seconds < 0:
        raise PolicyFailure(
            "cost model", "execute()", f"a step took {seconds!r} s (expected finite, >= 0)"
        )
    return float(seconds)


def guarded(policy: Any, role: str, defaults: dict[str, Any] | None = None) -> Any:
    """``policy`` with every method call wrapped: an exception inside it becomes a
    PolicyFailure for ``role``. Data attributes pass through unchanged; ``defaults``
    answers for those the policy leaves out (its family's optional flags)."""
    return _Guarded(policy, role, defaults or {})


class _Guarded:
    __slots__ = ("_defaults", "_policy", "_role")

    def __init__(self, policy: Any, role: str, defaults: dict[str, Any] | None = None):
        object.__setattr__(self, "_policy", policy)
        object.__setattr__(self, "_role", role)
        object.__setattr__(self, "_defaults", defaults or {})

    def __getattr__(self, name: str) -> Any:
        if name in self._defaults:
            return self._defaults[name]
        value = getattr(self._policy, name)
        if not callable(value):
            return value
        role = self._role

        @functools.wraps(value)
        def call(*args, **kwargs):
            try:
                return value(*args, **kwargs)
            except PolicyFailure:
                raise
            except Exception as err:  # the plug-in's own failure, reported as such
                problem = f"raised {type(err).__name__}: {err}"
                raise PolicyFailure(role, f"{name}()", problem) from err

        return call


def guarded_evictor(evictor: Any) -> Any:
    """A user's eviction policy, wrapped like :func:`guarded`, whose victims are also
    checked: exactly as many as asked for (or all there are), each once, each from the
    evictable set. (The check reads the whole set per pick: for plug-ins only.)"""
    return _GuardedEvictor(evictor, "eviction.policy")


class _GuardedEvictor(_Guarded):
    __slots__ = ()

    # Python looks special methods up on the type, never through __getattr__.
    def __len__(self) -> int:
        return self.__getattr__("__len__")()

    def __contains__(self, block: object) -> bool:
        return self.__getattr__("__contains__")(block)

    def pick_victims(self, num_blocks: int) -> list[int]:
        members = set(self.__getattr__("blocks")())
        victims = self.__getattr__("pick_victims")(num_blocks)
        expected = min(num_blocks, len(members))
        try:
            chosen = [int(block) for block in victims]
        except (TypeError, ValueError):
            chosen = None
        if chosen is None or len(chosen) != expected or len(set(chosen)) != len(chosen):
            problem = (
                f"returned {victims!r} for {num_blocks} blocks ({expected} expected, each once)"
            )
            raise PolicyFailure("eviction.policy", "pick_victims()", problem)
        strangers = [block for block in chosen if block not in members]
        if strangers:
            problem = f"returned blocks {strangers} that are not cached-evictable"
            raise PolicyFailure("eviction.policy", "pick_victims()", problem)
        return chosen
