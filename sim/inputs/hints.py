"""The "did you mean" hint of every one-line input error (unknown fields, kinds, presets,
policy names)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any


def did_you_mean(word: Any, valid: Iterable[str]) -> str:
    """``"; did you mean 'x'? (valid: a, b, c)"``: the closest valid name, if any is close,
    then every valid name, sorted."""
    names = sorted(valid)
    return f"{_guess(str(word), names)} (valid: {', '.join(names)})"


def _guess(word: str, names: list[str]) -> str:
    """Names that start with what was typed come first (``h100`` -> ``h100-sxm``),
    then the closest spelling."""
    prefixed = [name for name in names if name.lower().startswith(word.lower())] if word else []
    if len(prefixed) == 1:
        return f"; did you mean {prefixed[0]!r}?"
    if prefixed:
        return f"; did you mean one of {', '.join(map(repr, prefixed))}?"
    close = difflib.get_close_matches(word, names, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""
