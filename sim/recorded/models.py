"""Which model and GPU a recorded run names, as a scenario can name them."""

from __future__ import annotations

from pathlib import Path

from sim.catalog.presets import HARDWARE_PRESETS, MODEL_PRESETS, shipped_config_for
from sim.inputs.hints import did_you_mean
from sim.recorded.run import RecordError

#: pagesim's shipped config.json files (a checkout's scenarios/models/).
MODELS_DIR = Path(__file__).resolve().parents[2] / "scenarios" / "models"


def resolve_model_source(name: str | None) -> str | Path:
    """A preset name, or the config.json to copy: a file given by path, a shipped config
    by its name (``pagesim list models``) or the shipped config of a HuggingFace
    repository. RecordError saying what to give otherwise."""
    if not name:
        raise RecordError(
            "the run names no model: give --model (a preset, a config.json, or "
            "a HuggingFace repository pagesim ships a config of)"
        )
    if name in MODEL_PRESETS:
        return name
    path = Path(name)
    if path.suffix == ".json" and path.is_file():
        return path
    if "/" not in name and (MODELS_DIR / f"{name}.json").is_file():
        return MODELS_DIR / f"{name}.json"  # a shipped config by the name list models prints
    stem = shipped_config_for(name)
    if stem is not None:
        shipped = MODELS_DIR / f"{stem}.json"
        if shipped.is_file():
            return shipped
    raise RecordError(
        f"model {name!r}: not a preset, a config.json file or a repository pagesim ships a "
        "config.json of (pagesim list models); give --model path/to/config.json"
    )


def resolve_hardware_name(name: str | None) -> str:
    """A hardware preset name; RecordError naming the closest one otherwise."""
    if not name:
        raise RecordError("the run names no GPU: give --hardware (pagesim list hardware)")
    if name not in HARDWARE_PRESETS:
        raise RecordError(
            f"hardware {name!r}: not a preset{did_you_mean(name, HARDWARE_PRESETS)} "
            "(pagesim list hardware)"
        )
    return name
