"""The pytest recipe of docs/allocators.md, run as printed on a planted copy-on-write
bug (a block manager that writes into a shared last block in place, its own invariant
check off): the recipe's settings must find it."""

from __future__ import annotations

import inspect
import re

import pytest
from hypothesis import Phase, settings

from tests.docs.examples import ROOT


def recipe() -> str:
    page = (ROOT / "docs" / "allocators.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    (block,) = [b for b in blocks if "for_factory(MyAllocator)" in b]
    return block


def test_the_recipe_catches_a_missing_copy_on_write():
    code = recipe().replace(
        "from mypackage.allocator import MyAllocator",
        "from tests.backend.broken_allocators import UncheckedNoCopyOnWrite as MyAllocator",
    )
    assert "settings(" in code  # the recipe says which settings it needs
    namespace: dict = {}
    exec(compile(code, "docs/allocators.md", "exec"), namespace)
    test_case = namespace["TestMyAllocator"]
    # Finding is the recipe's; shrinking the example (most of a minute) is not tested here.
    test_case.settings = settings(test_case.settings, phases=[Phase.generate])
    with pytest.raises(AssertionError):
        test_case("runTest").runTest()


def test_the_recipe_passes_the_shipped_block_manager():
    code = recipe().replace(
        "from mypackage.allocator import MyAllocator",
        "from backend.blocks import BlockManager as MyAllocator",
    )
    namespace: dict = {}
    exec(compile(code, "docs/allocators.md", "exec"), namespace)
    namespace["TestMyAllocator"]("runTest").runTest()


def command_rows() -> list[str]:
    """The list docs/allocators.md gives of ``backend.base.Allocator``'s commands: each
    method with its signature, whether a subclass must write it, and the first paragraph
    of its docstring (a list, not a table: the signatures hold pipes)."""
    from backend.base import Allocator

    rows = []
    for name, member in inspect.getmembers(Allocator):
        if name.startswith("_") or not inspect.isfunction(member):
            continue
        signature = str(inspect.signature(member)).replace("'", "")
        signature = signature.replace("(self, ", "(").replace("(self)", "()")
        required = " (to write)" if getattr(member, "__isabstractmethod__", False) else ""
        summary = " ".join(inspect.getdoc(member).split("\n\n")[0].split())
        rows.append(f"* `{name}{signature}`{required}: {summary}")
    return rows


def test_the_docs_give_every_command_its_signature():
    page = (ROOT / "docs" / "allocators.md").read_text(encoding="utf-8")
    missing = [row for row in command_rows() if row not in page]
    assert not missing, "docs/allocators.md lacks (or has stale) entries:\n" + "\n".join(missing)
