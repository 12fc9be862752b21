"""Correct allocators a user might write: subclasses of the shipped block manager that
override its commands and only call ``super()``. The checker must pass them
(tests/backend/test_allocator_checker.py, tests/sim/cli/test_check_allocator.py).

* :class:`OverridesEveryCommand`: every public method, the unchecked (input-trusting)
  forms included;
* :class:`OverridesTheCheckedCommands`: every public method but the unchecked forms,
  which the base class then hides from the engine (a subclass sees every call it
  overrides), while the shipped manager's own checked commands still reach them.
"""

from __future__ import annotations

import inspect

from backend.blocks import BlockManager
from backend.capabilities import UNCHECKED_FORMS

COMMANDS = sorted(
    name
    for name, value in inspect.getmembers(BlockManager, inspect.isfunction)
    if not name.startswith("_")
)


def _calling_super(class_name: str, names: list[str]) -> type[BlockManager]:
    """A BlockManager subclass whose ``names`` each call ``super()`` and nothing else,
    defined in its class body (so the base class sees them when the class is made)."""
    made: list[type] = []

    def forwarding(name: str):
        def command(self, *args, **kwargs):
            return getattr(super(made[0], self), name)(*args, **kwargs)

        command.__name__ = command.__qualname__ = name
        return command

    namespace = {name: forwarding(name) for name in names}
    namespace["__module__"] = __name__
    made.append(type(class_name, (BlockManager,), namespace))
    return made[0]


OverridesEveryCommand = _calling_super("OverridesEveryCommand", COMMANDS)
OverridesTheCheckedCommands = _calling_super(
    "OverridesTheCheckedCommands", [name for name in COMMANDS if name not in UNCHECKED_FORMS]
)
