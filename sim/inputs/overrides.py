"""A hardware calibration file (``pagesim calibrate --observed RUN [RUN...]`` writes one):
the fitted physical figures, applied to a scenario that names the file in its
``calibration`` field.

The file is YAML with up to two sections, each optional: ``hardware`` (HardwareSpec
fields: ``sustained_bandwidth_fraction``, ``streaming_fraction``, ``gemm_efficiency``,
``attention_efficiency``, ...) and ``cost_model: {params: {...}}`` (CostParams fields:
``interconnect_efficiency``, ``allreduce_latency_s``, ``cpu_step_overhead_s``, ...). They
replace what the scenario's preset says, as ``{preset: NAME, field: value}`` would; the
scenario's own explicit settings of the same fields win. A ``fit`` section (what the fit
was, on which runs) is for people and is not applied.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sim.inputs.textfile import read_text

SECTIONS = ("hardware", "cost_model", "fit")


def read_overrides(path: Path) -> dict[str, Any]:
    """The file's ``hardware`` and ``cost_model`` sections; ValueError (one line)."""
    text = read_text(path, ValueError)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ValueError(f"{path}{where}: not YAML") from None
    if not isinstance(data, dict) or not set(data) <= set(SECTIONS):
        raise ValueError(f"{path}: expected a mapping with sections {', '.join(SECTIONS)}")
    out = {}
    for section in ("hardware", "cost_model"):
        value = data.get(section)
        if value is not None and not isinstance(value, dict):
            raise ValueError(f"{path}: {section}: expected a mapping")
        if value:
            out[section] = value
    cost = out.get("cost_model")
    if cost is not None and (set(cost) - {"params"} or not isinstance(cost.get("params"), dict)):
        raise ValueError(f"{path}: cost_model: expected only params: {{...}}")
    return out


def apply_overrides(raw: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with the calibration's figures under its own explicit ones."""
    raw = dict(raw)
    hardware = overrides.get("hardware")
    if hardware:
        given = raw.get("hardware", "h100-sxm")
        given = {"preset": given} if isinstance(given, str) else dict(given)
        raw["hardware"] = {**hardware, **given}
    params = (overrides.get("cost_model") or {}).get("params")
    if params:
        cost = dict(raw.get("cost_model") or {})
        cost["params"] = {**params, **(cost.get("params") or {})}
        raw["cost_model"] = cost
    return raw
