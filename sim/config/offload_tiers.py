"""An offload tier of the prefix cache below the device pool, as a scenario's
``cache.offload`` lists it (backend/connectors/offload.py keeps it)."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from sim.config.policy_names import check_policy_name
from sim.inputs.schema import StrictModel

_GIB = 1 << 30
#: the tiers modelled, in the order a scenario lists them (nearest the GPU first)
TIERS = ("cpu", "disk", "remote")


class OffloadTierSpec(StrictModel):
    """One tier of the prefix cache below the device pool, as vLLM's KV offloading
    connector keeps it (backend/connectors/offload.py: computed full blocks written through,
    looked up after the device's cache, loaded back instead of recomputed)."""

    tier: str = "cpu"
    """Where the tier lives: ``cpu``, host memory over each GPU's host link (vLLM's native
    offloading backend), first; then optionally ``disk``, the replica's local storage,
    and ``remote``, one store every replica of the cluster shares (Mooncake's store,
    LMCache's remote backend), in that order: every CPU store cascades to them and their
    hits come back through the CPU tier (vLLM 0.33's tiering)."""
    capacity_gib: float | None = Field(default=None, gt=0)
    """Its size in GiB for the whole replica, summed over its GPUs (vLLM's
    ``--kv-offloading-size``); a remote tier's for the whole cluster."""
    num_blocks: int | None = Field(default=None, ge=1)
    """Its size in blocks of ``cache.block_size`` tokens instead of ``capacity_gib`` (set one)."""
    eviction: str = "lru"
    """Which stored block goes first when the tier is full, a policy of the eviction registry
    (vLLM's connector offers ``lru``, its default, and ``arc``)."""

    @field_validator("tier")
    @classmethod
    def _modelled(cls, tier: str) -> str:
        if tier not in TIERS:
            raise ValueError(f"expected one of {', '.join(map(repr, TIERS))}, got {tier!r}")
        return tier

    @field_validator("eviction")
    @classmethod
    def _registered(cls, name: str) -> str:
        return check_policy_name("eviction", name)

    @model_validator(mode="after")
    def _one_size(self) -> OffloadTierSpec:
        if (self.capacity_gib is None) == (self.num_blocks is None):
            raise ValueError("set capacity_gib or num_blocks, one of them")
        return self

    @property
    def cluster_wide(self) -> bool:
        """Whether the tier is one store for every replica of the cluster (a remote tier),
        not one per replica: built once, sized and counted once."""
        return self.tier == "remote"

    def blocks(self, block_bytes: int) -> int:
        """The tier's blocks: ``num_blocks``, or ``capacity_gib`` over the KV bytes one
        block takes on the whole replica (vLLM divides the same way)."""
        if self.num_blocks is not None:
            return self.num_blocks
        return int(self.capacity_gib * _GIB // block_bytes)


def check_tier_order(tiers: list[OffloadTierSpec]) -> str | None:
    """What is wrong with the order of ``tiers`` (None: nothing): the CPU tier first,
    each tier once, nearest the GPU first."""
    names = [tier.tier for tier in tiers]
    if names[0] != "cpu":
        return f"the first tier is 'cpu' (the others are reached through it), got {names[0]!r}"
    if names != sorted(set(names), key=TIERS.index):
        return f"expected each tier once, nearest the GPU first ({', '.join(TIERS)}), got {names}"
    return None
