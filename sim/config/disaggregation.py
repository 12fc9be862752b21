"""``routing.disaggregation``: prefill and decode on different instances.

Two pools, each a number of instances with its own hardware, parallelism and engine
settings (a pool's fields override the scenario's own for its instances), a link between
them, and the decider that says which requests go through the prefill pool (llm-d's
rules: always, or only when the uncached part of the prompt is longer than a threshold).
A pool is validated as a whole scenario of its own (:func:`pool_scenario`), so each of its
settings is checked as the scenario's are and an error names the pool's field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_serializer, model_validator

from sim.config.errors import error_at
from sim.config.policy_names import check_policy_name
from sim.inputs.schema import StrictModel, drop_unset

#: The links a prefill instance's KV can cross to a decode instance (sim/catalog/links.py
#: prices each): NVLink inside a node, an RDMA NIC per GPU across nodes, or PCIe through
#: host memory.
PeerLinkKind = Literal["nvlink", "network", "pcie-host"]

#: Whether the decode side reads the prompt's blocks once the prefill has finished
#: (vLLM's NIXL connector, ``pull``) — the one hand-off modelled so far.
TransferRule = Literal["pull-after-prefill"]


class PoolSpec(StrictModel):
    """One pool of instances, all alike: how many, the router that picks one per request,
    and the scenario settings its instances have instead of the scenario's own."""

    replicas: int = Field(default=1, ge=1)
    """Instances in the pool, each with its pool's ``tensor_parallel`` GPUs, its own KV pool and
    its own scheduler."""
    router: str = Field(default="round-robin", validate_default=True)
    """Which instance of the pool a request goes to: a registered router or a plug-in."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of the pool's router."""
    hardware: Any = None
    """The pool's GPU, in any form the scenario's ``hardware`` takes; unset: the scenario's."""
    tensor_parallel: int | None = Field(default=None, ge=1)
    """GPUs per instance of the pool; unset: the scenario's ``tensor_parallel``."""
    cache: dict[str, Any] = Field(default_factory=dict)
    """Fields of the scenario's ``cache`` section that differ in this pool (merged over it)."""
    scheduler: dict[str, Any] = Field(default_factory=dict)
    """Fields of the scenario's ``scheduler`` section that differ in this pool."""
    preemption: dict[str, Any] = Field(default_factory=dict)
    """Fields of the scenario's ``preemption`` section that differ in this pool."""

    @field_validator("router")
    @classmethod
    def _registered(cls, name: str) -> str:
        return check_policy_name("routing", name)

    @model_serializer(mode="wrap")
    def _leave_out_the_scenarios_own(self, handler) -> dict[str, Any]:
        unset = {"hardware": None, "tensor_parallel": None, "params": {}}
        return drop_unset(handler(self), unset | {k: {} for k in _SECTIONS[:3]})

    def overrides(self) -> dict[str, Any]:
        """The scenario fields this pool sets, as a partial scenario mapping."""
        fields: dict[str, Any] = {}
        if self.hardware is not None:
            fields["hardware"] = self.hardware
        if self.tensor_parallel is not None:
            fields["tensor_parallel"] = self.tensor_parallel
        for section in ("cache", "scheduler", "preemption"):
            if getattr(self, section):
                fields[section] = getattr(self, section)
        fields["routing"] = {"replicas": self.replicas, "router": self.router}
        if self.params:
            fields["routing"]["params"] = self.params
        return fields


class DisaggregationSpec(StrictModel):
    """Prefill and decode pools, the link between them and which requests are split."""

    prefill: PoolSpec = Field(default_factory=PoolSpec)
    """The instances that compute prompts and hand their KV over."""
    decode: PoolSpec = Field(default_factory=PoolSpec)
    """The instances that read a prompt's KV and generate its output; a request the decider
    keeps off the prefill pool is served here whole."""
    link: PeerLinkKind = "network"
    """What joins the pools: ``nvlink`` (same node), ``network`` (one 400 Gb/s RDMA NIC per GPU)
    or ``pcie-host`` (through host memory). Each instance's GPUs move their share of the KV over
    their own links; transfers into or out of one instance share its links' bandwidth."""
    decider: Literal["always", "prefix-aware"] = "always"
    """Which requests go through the prefill pool (llm-d's P/D deciders): ``always``, or
    ``prefix-aware``: only those whose prompt, less what the chosen decode instance holds in its
    prefix cache, is longer than ``threshold`` tokens."""
    threshold: int = Field(default=0, ge=0)
    """``prefix-aware``: uncached prompt tokens at or below which the decode instance computes the
    prompt itself."""
    transfer: TransferRule = "pull-after-prefill"
    """When the KV moves: ``pull-after-prefill``, the decode instance reads the prompt's blocks
    once the prefill finished and it has allocated them (vLLM's NIXL connector)."""

    @model_validator(mode="after")
    def _threshold_with_its_decider(self) -> DisaggregationSpec:
        if self.threshold and self.decider != "prefix-aware":
            raise error_at(
                "routing.disaggregation.threshold", "only with decider: prefix-aware (set it 0)"
            )
        return self


def pool_scenario(base: dict[str, Any], pool: PoolSpec) -> dict[str, Any]:
    """The raw mapping of the scenario one pool's instances run: ``base`` (the scenario's,
    without its disaggregation) with the pool's fields over it, section by section."""
    merged = dict(base)
    for field, value in pool.overrides().items():
        section = merged.get(field)
        if field in _SECTIONS and isinstance(section, dict):
            merged[field] = {**section, **value}
        else:
            merged[field] = value  # (a GPU is given whole, never merged field by field)
    return merged


#: The scenario sections a pool's fields are merged into, field by field.
_SECTIONS = ("cache", "scheduler", "preemption", "routing")
