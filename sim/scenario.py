"""The scenario schema (pydantic v2) and its YAML loader.

A scenario is validated once, by :func:`load_scenario`, into a frozen :class:`Scenario`;
every section has defaults, so ``model: llama-3-8b`` alone is a valid scenario. Every
model forbids unknown fields, so a misspelt key fails with the closest valid name.

Placement decisions:

* ``tensor_parallel`` is a top-level field (the ``hardware`` section is one GPU's
  datasheet, shared by every GPU of the group).
* ``cache.num_blocks`` set: the device pool has exactly that many blocks. Unset (the
  default): the pool is derived from memory by :func:`sim.costmodel.kv_pool_blocks`
  (capacity x ``gpu_memory_utilization`` - weights / tp - activation reserve).
* ``cache.cpu_swap_gib`` is per GPU (as vLLM's ``swap_space``); ``num_cpu_blocks`` sets
  the CPU pool directly instead.
* ``model`` and ``hardware`` hold the *resolved* specs after validation, so the dumped
  scenario (``scenario.json``) records the exact shapes and figures a run used.
* Paths inside a scenario (traces, length tables, calibration files) are kept as written
  (never made absolute in a dump); they resolve against the scenario file's directory.

User mistakes raise :class:`ScenarioError` with one line: ``<file>: <field.path>: <what
was expected / got>``.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from sim.costmodel import CostParams, kv_pool_blocks
from sim.hardware import HardwareSpec, ModelSpec, expand_preset
from sim.hints import did_you_mean
from sim.schema import StrictModel
from sim.vidur_profiles import default_network, vidur_names
from sim.workload import (
    ArrivalSpec,
    FileRef,
    LengthDist,
    TraceArrival,
    WorkloadSpec,
    expand_length_shorthand,
    resolve_existing_dir,
    resolve_existing_file,
)

__all__ = ["Scenario", "ScenarioError", "apply_override", "load_scenario", "validate_scenario"]

_GIB = 1 << 30


class ScenarioError(ValueError):
    """A user mistake in a scenario file or an override; the message is one line."""


def _error_at(path: str, message: str) -> PydanticCustomError:
    """An error to report at ``path`` (dotted) from a validator that sees the whole
    scenario (pydantic would otherwise report it at the validator's own level)."""
    return PydanticCustomError("at_path", "{message}", {"path": path, "message": message})


# --------------------------------------------------------------------------------------
# Model and hardware: a preset name, an explicit shape, or {preset: NAME, overrides...}
# --------------------------------------------------------------------------------------


ResolvedModel = Annotated[
    ModelSpec, BeforeValidator(functools.partial(expand_preset, kind="model"))
]
ResolvedHardware = Annotated[
    HardwareSpec, BeforeValidator(functools.partial(expand_preset, kind="hardware"))
]


# --------------------------------------------------------------------------------------
# Policy names, validated against the registries in policies/
# --------------------------------------------------------------------------------------

_REGISTRIES = {
    "batching": "BATCHING",
    "scheduling": "SCHEDULERS",
    "preemption": "VICTIMS",
    "eviction": "EVICTORS",
    "routing": "ROUTERS",
}


@functools.cache
def _import_policy_modules() -> None:
    """Import every module of ``policies`` once, so everything that registers itself
    has done so before a name is checked."""
    import policies

    for info in pkgutil.iter_modules(policies.__path__, "policies."):
        importlib.import_module(info.name)


def _registry(family: str):
    """The registry of a policy family (``scheduling``, ``preemption``, ...)."""
    _import_policy_modules()
    return getattr(importlib.import_module(f"policies.{family}"), _REGISTRIES[family])


def _check_policy(family: str, name: str) -> str:
    """``name`` if registered in ``family`` or a ``module:attr`` / ``file.py:attr``
    plug-in (loaded at run time, not here: loading runs user code)."""
    registry = _registry(family)
    if name in registry:
        return name
    hint = did_you_mean(name, registry.names())
    raise ValueError(f"unknown {registry.family} policy {name!r}{hint}")


# --------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------


class CacheSpec(StrictModel):
    """The KV pool and its allocator (see the module docstring for the pool size)."""

    block_size: int = Field(default=16, ge=1)
    num_blocks: int | None = Field(default=None, ge=1)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    #: None: sim.costmodel's default reserve for the model and tp
    activation_reserve_gib: float | None = Field(default=None, ge=0)
    prefix_caching: bool = False
    cpu_swap_gib: float = Field(default=0.0, ge=0)
    num_cpu_blocks: int | None = Field(default=None, ge=0)
    allocator: Literal["paged", "contiguous-max", "contiguous-pow2", "contiguous-oracle"] = "paged"

    @model_validator(mode="after")
    def _one_cpu_size(self) -> CacheSpec:
        if self.num_cpu_blocks is not None and self.cpu_swap_gib > 0:
            raise _error_at("cache.num_cpu_blocks", "set num_cpu_blocks or cpu_swap_gib, not both")
        if self.prefix_caching and self.allocator != "paged":
            raise _error_at(
                "cache.prefix_caching",
                f"prefix caching needs the paged allocator, got allocator {self.allocator!r}",
            )
        return self

    def device_blocks(self, model: ModelSpec, hw: HardwareSpec, tp: int = 1) -> int:
        """Device blocks per replica: ``num_blocks``, or derived from memory.
        Raises ValueError if the model leaves no room for KV on ``tp`` GPUs."""
        if self.num_blocks is not None:
            return self.num_blocks
        reserve = self.activation_reserve_gib
        return kv_pool_blocks(
            model,
            hw,
            tensor_parallel=tp,
            block_size=self.block_size,
            gpu_memory_utilization=self.gpu_memory_utilization,
            activation_reserve_bytes=None if reserve is None else int(reserve * _GIB),
        )

    def cpu_blocks(self, model: ModelSpec, tp: int = 1) -> int:
        """CPU swap blocks per replica: ``num_cpu_blocks``, or ``cpu_swap_gib`` of each
        GPU's host memory divided by that GPU's share of one block."""
        if self.num_cpu_blocks is not None:
            return self.num_cpu_blocks
        block_bytes = self.block_size * model.kv_bytes_per_token(tp)
        return int(self.cpu_swap_gib * _GIB // block_bytes)


class SchedulerSpec(StrictModel):
    policy: str = Field(default="fcfs", validate_default=True)
    #: keyword arguments of the policy's constructor
    params: dict[str, Any] = Field(default_factory=dict)
    max_num_seqs: int = Field(default=256, ge=1)
    max_num_batched_tokens: int = Field(default=8192, ge=1)
    chunked_prefill: bool = True
    #: fraction of device blocks kept free when admitting a new request
    watermark: float = Field(default=0.01, ge=0, lt=1)
    #: "whole-prompt": admit only if the whole prompt's KV fits now; "first-chunk": only
    #: the first chunk must fit, later chunks take blocks as they run (paged only)
    admission: Literal["whole-prompt", "first-chunk"] = "whole-prompt"
    #: which kinds of work a step may hold (policies.batching): mixed, prefill-first,
    #: decode-first or static
    batching: str = Field(default="mixed", validate_default=True)

    @field_validator("policy")
    @classmethod
    def _registered(cls, name: str) -> str:
        return _check_policy("scheduling", name)

    @field_validator("batching")
    @classmethod
    def _registered_batching(cls, name: str) -> str:
        return _check_policy("batching", name)


class PreemptionSpec(StrictModel):
    mode: Literal["recompute", "swap"] = "recompute"
    victim: str = Field(default="last-arrived", validate_default=True)

    @field_validator("victim")
    @classmethod
    def _registered(cls, name: str) -> str:
        return _check_policy("preemption", name)


class EvictionSpec(StrictModel):
    """Which cached prefix block is reclaimed first (prefix caching only)."""

    policy: str = Field(default="lru", validate_default=True)

    @field_validator("policy")
    @classmethod
    def _registered(cls, name: str) -> str:
        return _check_policy("eviction", name)


class RoutingSpec(StrictModel):
    replicas: int = Field(default=1, ge=1)
    router: str = Field(default="round-robin", validate_default=True)
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("router")
    @classmethod
    def _registered(cls, name: str) -> str:
        return _check_policy("routing", name)


class SLOSpec(StrictModel):
    """Targets for goodput: a request meets its SLO if both hold."""

    ttft_s: float = Field(default=2.0, gt=0)
    tpot_s: float = Field(default=0.2, gt=0)


class SimulationSpec(StrictModel):
    """Run length (requests or simulated seconds, whichever ends first; num_requests
    defaults to 1000 when neither is given; both null replays a whole trace), the
    warm-up excluded from metrics, the seed, and a safety horizon for the SimPy clock."""

    num_requests: int | None = Field(default=None, ge=1)
    duration_s: float | None = Field(default=None, gt=0)
    warmup_requests: int = Field(default=0, ge=0)
    seed: int = Field(default=0, ge=0)
    max_sim_time_s: float = Field(default=1e6, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _default_length(cls, data: Any) -> Any:
        if isinstance(data, dict) and "num_requests" not in data and "duration_s" not in data:
            return {**data, "num_requests": 1000}
        return data

    @model_validator(mode="after")
    def _warmup_leaves_requests(self) -> SimulationSpec:
        if self.num_requests is not None and self.warmup_requests >= self.num_requests:
            raise _error_at(
                "simulation.warmup_requests",
                f"expected fewer than num_requests ({self.num_requests}), "
                f"got {self.warmup_requests}",
            )
        return self


class BackendSpec(StrictModel):
    """Where step times come from: ``model`` (the cost model) or ``torch`` (run the step
    on the real paged backend and measure it)."""

    kind: Literal["model", "torch"] = "model"
    device: Literal["cpu", "cuda"] = "cpu"
    dtype: Literal["float32", "float16", "bfloat16"] = "float32"


class CostModelSpec(FileRef):
    """Where step times come from when ``backend.kind`` is ``model``:

    * ``analytic`` (default): the kernel-level model of sim.costmodel, optionally with
      ``params`` overrides;
    * ``calibrated``: unit costs fitted to a profile, read from ``file``;
    * ``profile``: Vidur's published GPU profiles (``format: vidur``) under ``path`` (its
      ``data/profiling`` folder, or the folder holding ``mlp.csv``), interpolated; the
      analytic model covers what lies outside them. ``device``, ``profile_model`` and
      ``network`` are Vidur's names for the GPU, the model and the node (default: the
      counterparts of the scenario's presets).

    Paths are relative to the scenario file."""

    _file_field = "file"
    kind: Literal["analytic", "calibrated", "profile"] = "analytic"
    file: str | None = None
    params: CostParams | None = None
    format: Literal["vidur"] = "vidur"
    path: str | None = None
    device: str | None = None
    profile_model: str | None = None
    network: str | None = None
    _profile_dir: Path | None = PrivateAttr(default=None)

    @field_validator("file")
    @classmethod
    def _exists(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            resolve_existing_file(value, info)
        return value

    @field_validator("path")
    @classmethod
    def _is_directory(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            resolve_existing_dir(value, info)
        return value

    @model_validator(mode="after")
    def _inputs_for_kind(self, info: ValidationInfo) -> CostModelSpec:
        if self.kind == "calibrated" and self.file is None:
            raise _error_at("cost_model.file", "a calibrated cost model needs a file")
        if self.kind == "profile" and self.path is None:
            raise _error_at("cost_model.path", "a profile cost model needs a path (a folder)")
        if self.path is not None:
            self._profile_dir = resolve_existing_dir(self.path, info)
        return self

    @property
    def profile_dir(self) -> Path | None:
        """The absolute profile folder (None unless ``path`` is set)."""
        return self._profile_dir

    def vidur_names(self, hardware: HardwareSpec, model: ModelSpec) -> tuple[str, str, str]:
        """(device, model, network) names in Vidur's layout: the fields when set, else
        the counterparts of the presets. Raises ValueError naming the field to set."""
        device, model_name = vidur_names(hardware.name, model.name)
        device = self.device or device
        model_name = self.profile_model or model_name
        if device is None:
            raise _error_at(
                "cost_model.device",
                f"no Vidur device name is known for hardware {hardware.name!r}; set it "
                f"(e.g. a100, h100)",
            )
        if model_name is None:
            raise _error_at(
                "cost_model.profile_model",
                f"no Vidur model name is known for model {model.name!r}; set it (e.g. "
                f"meta-llama/Meta-Llama-3-8B)",
            )
        return device, model_name, self.network or default_network(device) or ""


class Scenario(StrictModel):
    """One simulated deployment and its traffic. Sections are documented on their
    classes; ``model``/``hardware`` are resolved specs after validation."""

    name: str = "scenario"
    description: str = ""
    #: where it came from (for error messages) and the folder relative paths live in
    _source: str = PrivateAttr(default="<scenario>")
    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)
    model: ResolvedModel = Field(default="llama-3-8b", validate_default=True)
    hardware: ResolvedHardware = Field(default="h100-sxm", validate_default=True)
    tensor_parallel: int = Field(default=1, ge=1)
    cache: CacheSpec = Field(default_factory=CacheSpec)
    scheduler: SchedulerSpec = Field(default_factory=SchedulerSpec)
    preemption: PreemptionSpec = Field(default_factory=PreemptionSpec)
    eviction: EvictionSpec = Field(default_factory=EvictionSpec)
    routing: RoutingSpec = Field(default_factory=RoutingSpec)
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
    slo: SLOSpec = Field(default_factory=SLOSpec)
    simulation: SimulationSpec = Field(default_factory=SimulationSpec)
    backend: BackendSpec = Field(default_factory=BackendSpec)
    cost_model: CostModelSpec = Field(default_factory=CostModelSpec)

    @model_validator(mode="after")
    def _fits_together(self) -> Scenario:
        sim = self.simulation
        replay = isinstance(self.workload.arrival, TraceArrival)
        if sim.num_requests is None and sim.duration_s is None and not replay:
            raise _error_at(
                "simulation.num_requests", "set num_requests or duration_s (or replay a trace)"
            )
        try:
            blocks = self.cache.device_blocks(self.model, self.hardware, self.tensor_parallel)
        except ValueError as err:
            raise _error_at("tensor_parallel", str(err)) from None
        if blocks < 1:
            raise _error_at("cache.num_blocks", f"expected at least one block, got {blocks}")
        sched = self.scheduler
        if sched.max_num_batched_tokens < sched.max_num_seqs:
            raise _error_at(
                "scheduler.max_num_batched_tokens",
                f"must be >= scheduler.max_num_seqs ({sched.max_num_seqs}) so that every "
                f"running sequence can decode each step, got {sched.max_num_batched_tokens}",
            )
        cpu = self.cache.cpu_blocks(self.model, self.tensor_parallel)
        if self.preemption.mode == "swap" and cpu == 0:
            raise _error_at(
                "preemption.mode",
                "swap needs CPU space: set cache.cpu_swap_gib or cache.num_cpu_blocks",
            )
        if self.cost_model.kind == "profile":
            self.cost_model.vidur_names(self.hardware, self.model)  # names must be known
        return self

    @property
    def source(self) -> str:
        """The scenario file (or '<scenario>'), for one-line error messages."""
        return self._source

    def resolve_plugin(self, name: str) -> str:
        """A ``path/file.py:attr`` plug-in name with a relative path resolved against the
        scenario's folder (like trace files) when the file is there; others unchanged."""
        target, sep, attr = name.rpartition(":")
        if sep and target.endswith(".py") and not Path(target).is_absolute():
            beside = self._base_dir / target
            if beside.is_file():
                return f"{beside}:{attr}"
        return name


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------


def load_scenario(
    path: str | Path, overrides: typing.Sequence[str] = (), seed: int | None = None
) -> Scenario:
    """Read, override and validate a scenario file.

    ``overrides`` are ``key.path=value`` strings (value parsed as a YAML scalar) applied
    to the raw mapping before validation; ``seed`` replaces ``simulation.seed``. The
    scenario's ``name`` defaults to the file's stem. Raises ScenarioError (one line).
    """
    source = str(path)
    raw = _read_yaml(Path(path), source)
    for assignment in overrides:
        apply_override(raw, assignment, source)
    if seed is not None:
        apply_override(raw, f"simulation.seed={int(seed)}", source)
    raw.setdefault("name", Path(path).stem)
    return validate_scenario(raw, source, base_dir=Path(path).resolve().parent)


def validate_scenario(raw: dict, source: str = "<scenario>", *, base_dir: Path | None = None):
    """Validate an already-parsed mapping; relative paths resolve against ``base_dir``
    (default: the working directory). Raises ScenarioError (one line)."""
    context = {"base_dir": str(base_dir or Path.cwd())}
    try:
        scenario = Scenario.model_validate(raw, context=context)
    except ValidationError as err:
        raise ScenarioError(format_validation_error(err, source, raw)) from None
    scenario._source = source
    scenario._base_dir = Path(context["base_dir"])
    return scenario


def _read_yaml(path: Path, source: str) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ScenarioError(f"{source}: cannot read the scenario: {err.strerror}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "YAML"
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ScenarioError(f"{source}: {where}: invalid YAML: {problem}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ScenarioError(f"{source}: (top level): expected a mapping of sections")
    return raw


# --------------------------------------------------------------------------------------
# --set overrides
# --------------------------------------------------------------------------------------


def apply_override(raw: dict, assignment: str, source: str = "<scenario>") -> None:
    """Apply one ``key.path=value`` to the raw mapping (mutates ``raw``).

    The path is checked against the schema (a misspelt key names the closest valid one);
    missing sections are created; a preset name or length shorthand on the way is
    expanded so one of its fields can be set. Raises ScenarioError."""
    key, sep, text = assignment.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise ScenarioError(f"{source}: --set {assignment}: expected KEY.PATH=VALUE")
    problem = _schema_path_problem(parts)
    if problem:
        raise ScenarioError(f"{source}: --set {key}: {problem}")
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        raise ScenarioError(f"{source}: --set {key}: cannot parse value {text!r}") from None
    node = raw
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = {}
        elif not isinstance(child, dict):
            child = _expand_shorthand(parts[: depth + 1], child)
            if child is None:
                where = ".".join(parts[: depth + 1])
                raise ScenarioError(
                    f"{source}: --set {key}: {where} is {node[part]!r}, not a section"
                )
        node[part] = child
        node = child
    node[parts[-1]] = value


def _expand_shorthand(path: list[str], value: Any) -> dict | None:
    """The mapping form of a shorthand value (preset name, length shorthand), or None."""
    if path in (["model"], ["hardware"]) and isinstance(value, str):
        return {"preset": value}
    if path[0] == "workload" and path[-1] in ("input", "output", "length", "turns"):
        expanded = expand_length_shorthand(value)
        return expanded if isinstance(expanded, dict) else None
    return None


def _schema_path_problem(parts: list[str]) -> str:
    """Why ``parts`` is not a field path of Scenario ('' if it is). Below a free-form
    dict (policy params) anything goes; union sections accept any variant's fields."""
    classes: list[type[BaseModel]] = [Scenario]
    for depth, part in enumerate(parts):
        if not classes:
            where = ".".join(parts[:depth])
            return f"{where} is a value, not a section"
        fields = {name: cls.model_fields[name] for cls in classes for name in cls.model_fields}
        if part == "preset" and classes[0] in (ModelSpec, HardwareSpec):
            return ""
        if part not in fields:
            return f"unknown field {part!r}{did_you_mean(part, sorted(fields))}"
        classes, open_dict = _section_types(fields[part].annotation)
        if open_dict:
            return ""
    return ""


def _section_types(annotation: Any) -> tuple[list[type[BaseModel]], bool]:
    """The model classes a field can hold, and whether it can hold a free-form dict."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _section_types(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        classes: list[type[BaseModel]] = []
        open_dict = False
        for arg in typing.get_args(annotation):
            sub, sub_open = _section_types(arg)
            classes += sub
            open_dict |= sub_open
        return classes, open_dict
    if origin is dict or annotation is dict:
        return [], True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation], False
    return [], False


# --------------------------------------------------------------------------------------
# ValidationError -> one line
# --------------------------------------------------------------------------------------


def _kind_tags(*unions: Any) -> set[str]:
    """The ``kind`` literals of tagged-union members, which pydantic inserts into error
    locations (``workload.arrival.poisson.rate_rps``) and the user never wrote."""
    members = (typing.get_args(typing.get_args(union)[0]) for union in unions)
    return {typing.get_args(m.model_fields["kind"].annotation)[0] for ms in members for m in ms}


_TAGS = _kind_tags(LengthDist, ArrivalSpec)


def format_validation_error(err: ValidationError, source: str, raw: Any) -> str:
    """``<file>: <field.path>: <message>`` for the first error, ``(+N more)`` after."""
    errors = err.errors(include_url=False)
    first = errors[0]
    ctx = first.get("ctx") or {}
    if first["type"] == "at_path":
        path = ctx["path"]
    else:
        loc = _user_loc(first["loc"], raw)
        if first["type"] == "unknown_field":
            loc.append(ctx["field"])
        if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
            loc.append("kind")
        path = ".".join(str(p) for p in loc) or "(top level)"
    message = _message(first)
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{source}: {path}: {message}{more}"


def _user_loc(loc: tuple, raw: Any) -> list:
    """The error location as the user wrote it: drop the union tags pydantic inserts
    (``workload.arrival.poisson.rate_rps`` -> ``workload.arrival.rate_rps``)."""
    out: list = []
    node = raw
    for part in loc:
        in_dict = isinstance(node, dict) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and part < len(node)
        if in_dict or in_list:
            node = node[part]
            out.append(part)
        elif isinstance(part, str) and (part in _TAGS or "[" in part):
            continue
        else:
            node = None
            out.append(part)
    return out


def _message(error: dict) -> str:
    kind, msg, ctx = error["type"], error["msg"], error.get("ctx") or {}
    got = error.get("input")
    if kind == "at_path":
        return ctx["message"]
    if kind == "unknown_field":
        return msg
    if kind == "missing":
        return "required field missing"
    if kind == "union_tag_invalid":
        valid = [t.strip(" '") for t in str(ctx.get("expected_tags", "")).split(",")]
        return f"unknown kind {ctx.get('tag')!r}{did_you_mean(ctx.get('tag'), valid)}"
    if kind == "union_tag_not_found":
        return "required field missing (the variant's kind)"
    if kind.startswith("value_error") or kind == "assertion_error":
        return msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    text = msg.replace("Input should be ", "expected ")
    return f"{text}, got {got!r}"
