"""What each Makefile target installs: a reader building the docs site or running the
default scenario gets only what that needs, not the test environment's torch and
triton (2.5 GB). Read from the Makefile as make reads it (``make -pn`` would run the
setup's shell checks)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

MAKEFILE = (Path(__file__).resolve().parents[1] / "Makefile").read_text()


def variables() -> dict[str, str]:
    return dict(re.findall(r"^(\w+) :?= (.+)$", MAKEFILE, re.M))


def expand(text: str) -> str:
    for name, value in variables().items():
        text = text.replace(f"$({name})", value)
    return text.replace("$(VENV)", variables()["VENV"])


def prerequisites(target: str) -> list[str]:
    line = re.search(rf"^{re.escape(target)}: *(.*)$", MAKEFILE, re.M)[1]
    return [expand(name) for name in line.split()]


def installs(stamp: str) -> list[str]:
    """The pip install arguments of the rule that makes ``stamp``."""
    for rule_target, recipe in re.findall(r"^(\S+): .*\n((?:\t.*\n)+)", MAKEFILE, re.M):
        if expand(rule_target) == stamp:
            return re.findall(r"pip install -q (?!--upgrade)(.+)", recipe)
    raise AssertionError(f"no rule makes {stamp}")


@pytest.mark.parametrize(
    ("target", "extras"),
    [("docs", "-e '.[docs]'"), ("run", "-e .")],
)
def test_a_target_installs_only_what_it_needs(target, extras):
    (stamp,) = prerequisites(target)
    assert installs(stamp) == [extras]


def test_the_test_environment_marks_the_smaller_ones_done():
    """Once ``make test`` installed everything, ``make run`` and ``make docs`` install
    nothing again."""
    (stamp,) = prerequisites("test")
    recipe = re.search(r"^\$\(TEST_STAMP\): .*\n((?:\t.*\n)+)", MAKEFILE, re.M)[1]
    touched = expand(re.search(r"touch (.+)", recipe)[1]).split()
    assert {stamp, *prerequisites("run"), *prerequisites("docs")} <= set(touched)


def test_make_test_checks_the_formatting_as_well_as_the_lint():
    recipe = re.search(r"^test: .*\n((?:\t.*\n)+)", MAKEFILE, re.M)[1]
    assert "ruff check ." in recipe and "ruff format --check ." in recipe
