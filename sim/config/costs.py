"""The ``cost_model`` section: which model gives step times.

* :class:`CostModelSpec`: ``analytic`` (with ``params`` overrides of
  :class:`sim.catalog.cost_params.CostParams`, the analytic model's constants), ``calibrated``
  (a fitted file) or ``profile`` (Vidur's published GPU profiles under ``path``).
* The names Vidur's profiles use for pagesim's presets, for ``profile`` defaults.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import (
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from sim.catalog.cost_params import CostParams
from sim.catalog.hardware import HardwareSpec, ModelSpec
from sim.config.errors import error_at
from sim.config.files import FileRef, resolve_existing_dir, resolve_existing_file

__all__ = ["CostModelSpec", "CostParams", "default_network", "vidur_names"]


#: pagesim preset -> Vidur's device and model directory names (its repository's names).
_DEVICES = {"a100-80gb": "a100", "a100-40gb": "a100", "h100-sxm": "h100", "a40": "a40"}
_NETWORKS = {"a100": "a100_dgx", "h100": "h100_dgx", "a40": "a40_pairwise_nvlink"}
_MODELS = {
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B",
    "llama-3-70b": "meta-llama/Meta-Llama-3-70B",
}


def vidur_names(hardware_name: str, model_name: str) -> tuple[str | None, str | None]:
    """Vidur's (device, model) directory names for pagesim preset names; None where there
    is no known counterpart (the scenario must then name it)."""
    return _DEVICES.get(hardware_name), _MODELS.get(model_name)


def default_network(device: str) -> str | None:
    """Vidur's node name for a device's all-reduce and CPU-overhead files (its DGX node
    where it has one)."""
    return _NETWORKS.get(device)


class CostModelSpec(FileRef):
    """Where step times come from when ``backend.kind`` is ``model``:

    * ``analytic`` (default): the kernel-level model of sim.costs.analytic, optionally with
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
    """``analytic`` (the kernel-level model), ``calibrated`` (unit costs fitted by ``pagesim
    calibrate``, read from ``file``) or ``profile`` (Vidur's GPU profiles under ``path``,
    interpolated)."""
    file: str | None = None
    """``calibrated`` only: the fitted cost file (``pagesim calibrate --out``), relative to the
    scenario file."""
    params: CostParams | None = None
    """Overrides of the analytic model's constants (``analytic``, and ``profile`` outside its
    measured grid); unset: the defaults, each with its source."""
    format: Literal["vidur"] = "vidur"
    """Layout of the profile folder: ``vidur`` (Vidur's published profiling CSVs), the only one."""
    path: str | None = None
    """``profile`` only: Vidur's ``data/profiling`` folder, or the folder holding one model's
    ``mlp.csv``; relative to the scenario file."""
    device: str | None = None
    """``profile`` only: Vidur's GPU name (``a100``, ``h100``, ``a40``); unset: the counterpart of
    the hardware preset."""
    profile_model: str | None = None
    """``profile`` only: Vidur's model name (e.g. ``meta-llama/Meta-Llama-3-8B``); unset: the
    counterpart of the model preset."""
    network: str | None = None
    """``profile`` only: Vidur's node name for the all-reduce and CPU-overhead profiles (e.g.
    ``h100_dgx``); unset: the device's DGX node."""
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
            raise error_at("cost_model.file", "a calibrated cost model needs a file")
        if self.kind == "profile" and self.path is None:
            raise error_at("cost_model.path", "a profile cost model needs a path (a folder)")
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
            raise error_at(
                "cost_model.device",
                f"no Vidur device name is known for hardware {hardware.name!r}; set it "
                f"(e.g. a100, h100)",
            )
        if model_name is None:
            raise error_at(
                "cost_model.profile_model",
                f"no Vidur model name is known for model {model.name!r}; set it (e.g. "
                f"meta-llama/Meta-Llama-3-8B)",
            )
        return device, model_name, self.network or default_network(device) or ""
