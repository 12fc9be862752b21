"""The field types of recorded files' typed models (sim.recorded.files.Record) and of the
engine settings a run carries: counts, times and published figures, each refusing what a
replay would read wrong (a boolean as a number, NaN, a negative count).
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BeforeValidator, Field


def not_a_flag(value: Any) -> Any:
    # JSON's true is not one request, nor one second (pydantic reads it as 1).
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {str(value).lower()}")
    return value


def written_as_number(value: Any) -> Any:
    """``not_a_flag``, and not a text either: a tool that measured a count or a time
    wrote a JSON number ("20" is a mistake pydantic would quietly parse). Engine
    settings, which come from command lines, may be texts (``Size``)."""
    if isinstance(value, str):
        raise ValueError(f"expected a number, got the text {value!r}"[:120])
    return not_a_flag(value)


def _published(value: Any) -> float | None:
    """A figure a client published: a finite number, else not published (None); a
    negative one is no latency, rate or throughput any client measured."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value):
        return None
    if value < 0:
        raise ValueError(f"expected a figure >= 0, got {value!r}")
    return float(value)


#: A count of requests or tokens: an integer in [0, 2^40] (an integral float is one).
Count = Annotated[int, BeforeValidator(written_as_number), Field(ge=0, le=1 << 40)]
#: A time on some clock, in seconds: any finite number.
Seconds = Annotated[float, BeforeValidator(written_as_number), Field(allow_inf_nan=False)]
#: A duration in seconds: a finite number, at least 0.
Elapsed = Annotated[float, BeforeValidator(written_as_number), Field(ge=0, allow_inf_nan=False)]
#: A figure a client published (a latency quantile, a throughput): a finite number, or
#: None where it is missing, null, NaN or not a number (clients write all four).
Published = Annotated[float | None, BeforeValidator(_published)]
#: A size an engine is configured with (sequences, tokens, blocks, GPUs): at least 1.
Size = Annotated[int, BeforeValidator(not_a_flag), Field(ge=1, le=1 << 40)]
