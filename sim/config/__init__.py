"""The scenario: its schema and its loading, every input a run reads validated once.

The scenario schema (:mod:`.scenario`, its sections in :mod:`.sections`, :mod:`.workload`,
:mod:`.arrivals`, :mod:`.costs`), models read from a HuggingFace config.json
(:mod:`.hf_config`), the files a scenario names (:mod:`.files`), engine profiles
(:mod:`.engines`), allocator plug-ins (:mod:`.allocators`), and loading with ``--set``
overrides and one-line errors (:mod:`.loader`, :mod:`.errors`); the scenario's JSON
schema for editors (:mod:`.json_schema`). The models and GPUs it names are in
``sim.catalog``, the readers it shares with other inputs in ``sim.inputs``. Nothing here
runs a simulation.
"""

from sim.catalog.hardware import HardwareSpec, ModelSpec
from sim.catalog.pool import kv_pool_blocks
from sim.catalog.presets import HARDWARE_PRESETS, MODEL_PRESETS, resolve_hardware, resolve_model
from sim.config.costs import CostModelSpec, CostParams
from sim.config.errors import ScenarioError
from sim.config.json_schema import scenario_json_schema
from sim.config.loader import apply_override, load_scenario, validate_scenario
from sim.config.scenario import Scenario
from sim.config.workload import WorkloadSpec

__all__ = [
    "HARDWARE_PRESETS",
    "MODEL_PRESETS",
    "CostModelSpec",
    "CostParams",
    "HardwareSpec",
    "ModelSpec",
    "Scenario",
    "ScenarioError",
    "WorkloadSpec",
    "apply_override",
    "kv_pool_blocks",
    "load_scenario",
    "resolve_hardware",
    "resolve_model",
    "scenario_json_schema",
    "validate_scenario",
]
