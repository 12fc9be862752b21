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
    close = difflib.get_close_matches(str(word), names, n=1)
    guess = f"; did you mean {close[0]!r}?" if close else ""
    return f"{guess} (valid: {', '.join(names)})"
