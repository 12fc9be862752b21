"""Which features do not work together yet, in one table.

Each row names the setting a refusal points at, when it applies and why, so a refusal
is one line that says what to change, and a feature that learns to work with another
removes one row. The scenario checks the table once its sections have validated
(``Scenario._fits_together``); nothing else refuses a combination of settings. (An
allocator's own InvalidRequest for arguments it cannot take is its contract, below
validation, not a second guard.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from backend.shipped import PAGED
from sim.config.errors import error_at

#: A validated ``sim.config.scenario.Scenario`` (not imported: the scenario checks this
#: table, so the table cannot import it back).
Scenario = Any

#: Said after a refusal that a sliding-window model causes.
WINDOWS_OFF = "or set model.sliding_window: off"


@dataclass(frozen=True)
class Unsupported:
    """``field``'s setting does not work with another: ``applies(scenario)`` says when,
    ``reason(scenario)`` what the refusal line says after the field."""

    field: str
    applies: Callable[[Scenario], bool]
    reason: Callable[[Scenario], str]


def _windows(s: Scenario) -> bool:
    return not s.model.kv_layout.is_plain


def _kept(s: Scenario) -> str:
    return f"{s.model.name!r} keeps {s.model.kv_layout.describe()}"


def _takes_groups(s: Scenario) -> bool:
    plugin = s.cache.plugin_allocator
    if plugin is None:
        return s.cache.allocator == PAGED
    return getattr(plugin, "supports_kv_groups", False) is True


def _tables_do_not_move(s: Scenario) -> str:
    return f"{_kept(s)}: swap space and the real backend do not move its tables yet; {WINDOWS_OFF}"


def _split(s: Scenario) -> bool:
    """Prefill and decode pools: the scenario's, or a pool's own (``Scenario.pool_role``)."""
    return s.routing.disaggregation is not None or s.pool_role is not None


def _lower_tiers(s: Scenario) -> list[str]:
    return [tier.tier for tier in s.cache.offload[1:]]


def _remote(s: Scenario) -> bool:
    return any(tier.cluster_wide for tier in s.cache.offload)


def _torch(s: Scenario) -> bool:
    return s.backend.kind == "torch"


UNSUPPORTED: tuple[Unsupported, ...] = (
    # the real backend
    Unsupported(
        "backend.kind",
        lambda s: _torch(s) and s.cache.allocator != PAGED,
        lambda s: (
            "torch reads KV through block tables; use cache.allocator: paged "
            f"(got {s.cache.allocator})"
        ),
    ),
    Unsupported(
        "backend.kind",
        lambda s: _torch(s) and s.model.moe is not None,
        lambda s: "torch: the real backend runs dense models only",
    ),
    Unsupported(
        "cache.kv_dtype",
        lambda s: _torch(s) and s.cache.kv_dtype != "auto",
        lambda s: "the real backend keeps KV in the model's dtype",
    ),
    Unsupported(
        "model.head_dim",
        lambda s: _torch(s) and s.model.head_dim % 2 == 1,
        lambda s: (
            "the real backend's rotary embedding rotates pairs: expected an even "
            f"head_dim, got {s.model.head_dim}"
        ),
    ),
    # Vidur's profiles
    Unsupported(
        "cost_model.kind",
        lambda s: s.cost_model.kind == "profile" and s.model.moe is not None,
        lambda s: "profile: Vidur's profiles hold dense models only, not MoE",
    ),
    # sliding windows (KV cache groups)
    Unsupported(
        "cache.allocator",
        lambda s: _windows(s) and not _takes_groups(s),
        lambda s: (
            f"{_kept(s)}: the paged allocator (or a plug-in whose supports_kv_groups "
            f"is True) keeps them, not {s.cache.allocator!r}; {WINDOWS_OFF}"
        ),
    ),
    Unsupported(
        "cache.cpu_swap_gib",
        lambda s: _windows(s) and bool(s.cache.cpu_blocks(s.model, s.tensor_parallel)),
        _tables_do_not_move,
    ),
    Unsupported("backend.kind", lambda s: _windows(s) and _torch(s), _tables_do_not_move),
    Unsupported(
        "cost_model.kind",
        lambda s: _windows(s) and s.cost_model.kind != "analytic",
        lambda s: (
            f"{_kept(s)}: the analytic cost model prices its windows "
            f"({s.cost_model.kind} prices every layer as full attention); {WINDOWS_OFF}"
        ),
    ),
    # prefill and decode pools
    Unsupported(
        "cache.allocator",
        lambda s: (
            _split(s) and (s.cache.plugin_allocator is not None or s.cache.allocator != PAGED)
        ),
        lambda s: (
            "prefill and decode pools pass a request's blocks from one block table to "
            f"another: the paged allocator keeps them, not {s.cache.allocator!r}"
        ),
    ),
    Unsupported(
        "routing.disaggregation",
        lambda s: _split(s) and _windows(s),
        lambda s: (
            f"{_kept(s)}: a window's hand-off (vLLM reads only the blocks it still reads) "
            f"is not modelled yet; {WINDOWS_OFF}"
        ),
    ),
    Unsupported(
        "routing.disaggregation",
        lambda s: _split(s) and _torch(s),
        lambda s: (
            "the real backend runs one instance: prefill and decode pools need backend.kind: model"
        ),
    ),
    # offload tiers below the CPU's
    Unsupported(
        "cache.offload",
        lambda s: bool(_lower_tiers(s)) and s.cost_model.kind == "calibrated",
        lambda s: (
            f"a {_lower_tiers(s)[0]} tier's reads are priced by the analytic and "
            "profile cost models; a calibration has no disk or network link (cost_model.kind: "
            "calibrated)"
        ),
    ),
    Unsupported(
        "cache.offload",
        lambda s: _remote(s) and _torch(s) and s.routing.replicas > 1,
        lambda s: (
            "the real backend keeps one store per replica: a remote tier shared by "
            f"{s.routing.replicas} replicas needs backend.kind: model"
        ),
    ),
)


def check_combinations(scenario: Scenario) -> None:
    """Raise the scenario's one-line error for the first row of :data:`UNSUPPORTED` that
    applies."""
    for row in UNSUPPORTED:
        if row.applies(scenario):
            raise error_at(row.field, row.reason(scenario))
