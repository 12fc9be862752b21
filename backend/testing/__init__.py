"""pagesim's allocator state machine, for any allocator (needs hypothesis: the ``test``
extra, ``pip install -e '.[test]'`` in a checkout, or ``make venv``).

In a pytest suite::

    from backend.testing import AllocatorStateMachine
    from mypackage import MyAllocator  # an Allocator subclass

    TestMyAllocator = AllocatorStateMachine.for_factory(MyAllocator).TestCase

From the command line: ``pagesim check-allocator mypackage:MyAllocator``; from Python:
:func:`check_allocator`. See machine.py for what is checked.
"""

from backend.testing.harness import supports_prefix_caching
from backend.testing.machine import AllocatorStateMachine
from backend.testing.runner import CheckResult, check_allocator

__all__ = ["AllocatorStateMachine", "CheckResult", "check_allocator", "supports_prefix_caching"]
