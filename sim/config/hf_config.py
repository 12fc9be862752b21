"""Models described by a HuggingFace ``config.json``: ``model: {config: PATH, ...}``.

The file is read locally (never from the hub). A relative path resolves against the
scenario file's folder, like a trace or a length table (:func:`sim.config.files.base_dir`);
the scenario keeps it as written. What is read, by ModelSpec field:

=====================  ====================================================================
``num_layers``         ``num_hidden_layers``
``hidden_size``        ``hidden_size``
``num_heads``          ``num_attention_heads``
``num_kv_heads``       ``num_key_value_heads`` (absent or null: ``num_attention_heads``)
``head_dim``           ``head_dim`` (absent or null: ``hidden_size / num_attention_heads``)
``intermediate_size``  ``intermediate_size`` (OPT: ``ffn_dim``)
``vocab_size``         ``vocab_size``
``max_model_len``      ``max_position_embeddings``
``dtype_bytes``        ``dtype`` or ``torch_dtype`` (absent: 2, a 16-bit serving dtype)
``tie_embeddings``     ``tie_word_embeddings`` (absent: transformers' default for the type)
``mlp``                from ``model_type``: gated (``swiglu``) or not (``gelu``, OPT)
``rope_theta``         ``rope_theta`` (or ``rope_parameters.rope_theta``), for the record
``rope_scaling``       ``rope_scaling`` (or ``rope_parameters``), for the record
``sliding_window``     ``sliding_window`` and ``layer_types``
``layer_types``        (:mod:`sim.config.hf_attention`)
``moe``                the experts of a ``mixtral``, ``qwen2_moe`` or ``qwen3_moe`` config
                       (:mod:`sim.config.hf_moe`)
``name``               the file's name without ``.json`` (a file named ``config.json``: its
                       folder's name)
=====================  ====================================================================

A field given beside ``config`` replaces what the file says, and the file's value for it
is not read (``{config: llama.json, max_model_len: 4096, dtype_bytes: 1}`` serves that
model with a 4K context in fp8). Only decoder-only types whose weights ModelSpec
counts are accepted (:data:`MODEL_TYPES`: dense, and the MoE types above); experts in
another type, multi-head latent attention (``kv_lora_rank``), another ``model_type``,
a multimodal wrapper (``text_config``: give the language model's own config instead,
its vision tower would go uncounted) or a missing or malformed field is a one-line
error naming the file and the field, at ``model.config``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationInfo

from sim.catalog.presets import expand_preset
from sim.config.errors import error_at
from sim.config.files import base_dir
from sim.config.hf_attention import read_attention, refuse_chunked_attention
from sim.config.hf_moe import MLA_TYPES, MOE_TYPES, MXFP4_TYPES, read_mla, read_moe
from sim.inputs.hints import did_you_mean
from sim.inputs.textfile import parse_json, read_text
from sim.inputs.user_errors import UserError


class ModelType(NamedTuple):
    mlp: str  # ModelSpec.mlp
    tied: bool  # transformers' default for tie_word_embeddings
    intermediate: str  # the key of the MLP's hidden width


#: The model types read, with what their transformers configuration class implies.
MODEL_TYPES = {
    "llama": ModelType("swiglu", False, "intermediate_size"),
    "mistral": ModelType("swiglu", False, "intermediate_size"),
    "qwen2": ModelType("swiglu", False, "intermediate_size"),
    "qwen3": ModelType("swiglu", False, "intermediate_size"),
    "opt": ModelType("gelu", True, "ffn_dim"),
    # Mixture-of-experts types (experts read by sim/config/hf_moe.py)
    "mixtral": ModelType("swiglu", False, "intermediate_size"),
    "qwen2_moe": ModelType("swiglu", False, "intermediate_size"),
    "qwen3_moe": ModelType("swiglu", False, "intermediate_size"),
    "deepseek_v2": ModelType("swiglu", False, "intermediate_size"),
    "deepseek_v3": ModelType("swiglu", False, "intermediate_size"),
    "gpt_oss": ModelType("swiglu", False, "intermediate_size"),
    # Gemma 3's language model (a gated GeLU MLP: three matrices, as SwiGLU's)
    "gemma3_text": ModelType("swiglu", True, "intermediate_size"),
}

#: Keys that make a config a mixture of experts (Mixtral, Qwen-MoE, DeepSeek, ...).
MOE_KEYS = (
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "moe_intermediate_size",
    "num_experts_per_tok",
)

#: dtype names (``torch.bfloat16`` as a config writes it) -> bytes per element.
DTYPES = {
    "float32": 4,
    "float": 4,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}

#: The largest count read; a config.json's counts are far smaller.
MAX_COUNT = 2**31 - 1
#: The largest file read as a config (they are a few KB; a label map can add some).
MAX_BYTES = 16 << 20
#: Deepest nesting of a value carried for the record (rope_scaling: 2 in every config).
MAX_RECORD_DEPTH = 4


class ConfigError(UserError, ValueError):
    """A config.json pagesim cannot read; the message is ``<file>: <field>: <why>``."""


def expand_model(value: Any, info: ValidationInfo) -> Any:
    """The scenario's ``model`` before ModelSpec validates it: ``{config: PATH, ...}`` as
    the fields read from the file with the others on top (and ``config`` kept as
    written); presets as :func:`~sim.catalog.presets.expand_preset` expands them."""
    if not isinstance(value, dict) or value.get("config") is None:
        return expand_preset(value, "model")
    written = value["config"]
    if "preset" in value:
        raise error_at("model.config", "set preset or config, not both")
    if not isinstance(written, str) or not written.strip():
        raise error_at("model.config", f"expected the path of a config.json, got {written!r}")
    overrides = {k: v for k, v in value.items() if k != "config"}
    try:
        fields = read_model_config(base_dir(info) / written, skip=set(overrides))
    except ConfigError as err:
        raise error_at("model.config", str(err)) from None
    return {**fields, **overrides, "config": written}


def read_model_config(path: Path, skip: set[str] = frozenset()) -> dict[str, Any]:
    """ModelSpec fields read from the config.json at ``path`` (those in ``skip`` are left
    out, unread). Raises ConfigError (one line naming the file and the field)."""
    try:  # a name too long for the file system, or with a NUL in it
        path = path.resolve()
        found, is_file, is_dir = path.exists(), path.is_file(), path.is_dir()
    except (OSError, ValueError) as err:
        reason = getattr(err, "strerror", None) or str(err)
        raise ConfigError(f"{_path_shown(path)}: cannot read: {reason}") from None
    if not found:
        raise ConfigError(f"{path}: file not found")
    if not is_file:
        kind = "a folder" if is_dir else "not a regular file"
        raise ConfigError(f"{path}: is {kind}, expected a config.json")
    raw = _read_json(path)
    return _Reader(raw, str(path), skip).fields(_default_name(path))


def _read_json(path: Path) -> dict[str, Any]:
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise ConfigError(f"{path}: {size} bytes, too large for a model config (at most 16 MiB)")
    text = read_text(path, ConfigError)
    try:
        raw = parse_json(text)
    except ValueError as err:
        raise ConfigError(f"{path}: not JSON: {err}") from None
    if not isinstance(raw, dict):
        kind = {list: "a list", str: "a string"}.get(type(raw), type(raw).__name__)
        raise ConfigError(f"{path}: (top level): expected a JSON object of fields, got {kind}")
    return raw


def _default_name(path: Path) -> str:
    if path.stem == "config":
        return path.parent.name or "custom"
    return path.stem


class _Reader:
    """One config's fields, each checked with its key in the error."""

    def __init__(self, raw: dict[str, Any], source: str, skip: set[str]):
        self.raw, self.source, self.skip = raw, source, skip
        self.type_name = ""  # the model_type, once checked

    def fail(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.source}: {key}: {message}")

    def fields(self, name: str) -> dict[str, Any]:
        refuse_chunked_attention(self)  # (by name, before its model type is looked at)
        kind = self._model_type()
        out: dict[str, Any] = {"name": name, "mlp": kind.mlp}
        wanted = {
            "num_layers": lambda: self.count("num_hidden_layers"),
            "hidden_size": lambda: self.count("hidden_size"),
            "num_heads": lambda: self.count("num_attention_heads"),
            "num_kv_heads": self._kv_heads,
            "head_dim": self._head_dim,
            "intermediate_size": lambda: self.count(kind.intermediate),
            "vocab_size": lambda: self.count("vocab_size"),
            "max_model_len": lambda: self.count("max_position_embeddings"),
            "dtype_bytes": self._dtype_bytes,
            "tie_embeddings": lambda: self.flag("tie_word_embeddings", kind.tied),
            "rope_theta": self._rope_theta,
            "rope_scaling": self._rope_scaling,
        }
        if self.type_name in MOE_TYPES:
            wanted["moe"] = lambda: read_moe(self, self.type_name)
        if self.type_name in MLA_TYPES:
            wanted["mla"] = lambda: read_mla(self)
            # (the query/key head: what prefill attention multiplies per head)
            wanted["head_dim"] = lambda: (
                self.count("qk_nope_head_dim") + self.count("qk_rope_head_dim")
            )
        for field, read in wanted.items():
            if field not in self.skip:
                out[field] = read()
        out |= {k: v for k, v in read_attention(self).items() if k not in self.skip}
        if kind.intermediate == "ffn_dim":
            self._no_projection(out)
        return {k: v for k, v in out.items() if v is not None and k not in self.skip}

    def _model_type(self) -> ModelType:
        if isinstance(self.raw.get("text_config"), dict):
            raise self.fail(
                "text_config",
                "a multimodal wrapper's config; give the language model's own config "
                "(its text_config as a file of its own)",
            )
        model_type = self.raw.get("model_type")
        mla_type = isinstance(model_type, str) and model_type in MLA_TYPES
        if self.raw.get("kv_lora_rank") not in (None, 0) and not mla_type:
            raise self.fail(
                "kv_lora_rank",
                f"{_shown(self.raw['kv_lora_rank'])}: multi-head latent attention (DeepSeek's "
                "MLA) is not modelled yet: its KV is one latent per token, not K and V per head",
            )
        if not isinstance(model_type, str) or model_type not in MOE_TYPES:
            for key in MOE_KEYS:
                if self.raw.get(key) not in (None, 0, False):
                    raise self.fail(
                        key,
                        f"{_shown(self.raw[key])}: a mixture-of-experts config of type "
                        f"{_shown(model_type)}; pagesim reads the experts of "
                        f"{', '.join(MOE_TYPES)} configs",
                    )
        if model_type is None:
            raise self.fail(
                "model_type", f"required field missing (one of {', '.join(MODEL_TYPES)})"
            )
        if not isinstance(model_type, str) or model_type not in MODEL_TYPES:
            hint = did_you_mean(str(model_type), list(MODEL_TYPES))
            raise self.fail("model_type", f"{_shown(model_type)} is not supported{hint}")
        self.type_name = model_type
        return MODEL_TYPES[model_type]

    def count(self, key: str, default: int | None = None) -> int:
        value = self.raw.get(key)
        if value is None:
            if default is not None:
                return default
            missing = "missing" if key not in self.raw else "null"
            raise self.fail(key, f"required field {missing}")
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
            raise self.fail(
                key, f"expected a positive integer of at most {MAX_COUNT}, got {_shown(value)}"
            )
        return value

    def flag(self, key: str, default: bool) -> bool:
        """``key`` as a boolean; absent or null: ``default`` (transformers' own)."""
        value = self.raw.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true or false, got {_shown(value)}")
        return value

    def _kv_heads(self) -> int:
        heads = self.count("num_attention_heads")
        kv = self.count("num_key_value_heads", default=heads)
        if heads % kv:
            raise self.fail(
                "num_key_value_heads",
                f"{kv} does not divide num_attention_heads ({heads})",
            )
        return kv

    def _head_dim(self) -> int:
        if self.raw.get("head_dim") is not None:
            return self.count("head_dim")
        hidden, heads = self.count("hidden_size"), self.count("num_attention_heads")
        if hidden % heads:
            raise self.fail(
                "num_attention_heads",
                f"{heads} does not divide hidden_size ({hidden}) and there is no head_dim",
            )
        return hidden // heads

    def _dtype_bytes(self) -> int | None:
        quantised = self._quantised_bytes()
        if quantised is not None:
            return quantised
        key = "dtype" if self.raw.get("dtype") is not None else "torch_dtype"
        value = self.raw.get(key)
        if value is None:
            return None  # ModelSpec's default, 2 bytes
        if not isinstance(value, str) or value.removeprefix("torch.") not in DTYPES:
            names = ", ".join(DTYPES)
            raise self.fail(
                key, f"expected one of {names} (or set model.dtype_bytes), got {_shown(value)}"
            )
        return DTYPES[value.removeprefix("torch.")]

    def _quantised_bytes(self) -> int | None:
        """1 for an FP8 checkpoint (``quantization_config.quant_method: fp8``, as DeepSeek-V3
        and the -FP8 releases ship); None for none. Other schemes are refused: their
        bytes per weight are not one element size."""
        config = self.raw.get("quantization_config")
        if config is None:
            return None
        if not isinstance(config, dict):
            raise self.fail("quantization_config", f"expected an object, got {_shown(config)}")
        method = config.get("quant_method")
        if method == "fp8":
            return 1
        if method == "mxfp4" and self.type_name in MXFP4_TYPES:
            return None  # (the experts' format: hf_moe.py; the rest is in the dtype)
        raise self.fail(
            "quantization_config.quant_method",
            f"{_shown(method)}: quantised weights are not modelled (fp8 is); set "
            "model.dtype_bytes beside config to say how many bytes a weight takes",
        )

    def _rope_parameters(self) -> dict[str, Any]:
        params = self.raw.get("rope_parameters")
        if params is not None and not isinstance(params, dict):
            raise self.fail("rope_parameters", f"expected an object or null, got {_shown(params)}")
        return params or {}

    def _rope_theta(self) -> float | None:
        key, value = "rope_theta", self.raw.get("rope_theta")
        if value is None:
            key, value = "rope_parameters.rope_theta", self._rope_parameters().get("rope_theta")
        if value is None:
            return None
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value <= 0:
            raise self.fail(key, f"expected a positive number, got {_shown(value)}")
        return float(value)

    def _rope_scaling(self) -> dict[str, Any] | None:
        value = self.raw.get("rope_scaling")
        if value is None:
            return self._rope_parameters() or None
        if not isinstance(value, dict):
            raise self.fail("rope_scaling", f"expected an object or null, got {_shown(value)}")
        if _depth(value) > MAX_RECORD_DEPTH:  # kept for the record only: a flat object
            raise self.fail(
                "rope_scaling", f"expected an object nested at most {MAX_RECORD_DEPTH} deep"
            )
        return value

    def _no_projection(self, out: dict[str, Any]) -> None:
        """OPT's smaller models project embeddings to and from a narrower width: weights
        ModelSpec does not count."""
        proj = self.raw.get("word_embed_proj_dim")
        hidden = out.get("hidden_size") or self.count("hidden_size")
        if proj is not None and proj != hidden:
            raise self.fail(
                "word_embed_proj_dim",
                f"{_shown(proj)} differs from hidden_size ({hidden}): embedding projections "
                "are not modelled",
            )


def _depth(value: Any) -> int:
    """Nesting depth of dicts and lists (a scalar is 0), stopping once past the limit."""
    stack, deepest = [(value, 0)], 0
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list) and level <= MAX_RECORD_DEPTH:
            children = item.values() if isinstance(item, dict) else item
            stack += [(child, level + 1) for child in children]
            deepest = max(deepest, level + 1)
    return deepest


def _shown(value: Any, width: int = 40) -> str:
    """``repr(value)`` cut to ``width`` characters."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _path_shown(path: Path) -> str:
    """A path that cannot be opened, on one short line (quoted if it holds control
    characters)."""
    text = str(path)
    if not text.isprintable():
        return _shown(text, 120)
    return text if len(text) <= 120 else text[:117] + "..."
