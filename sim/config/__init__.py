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

from sim.config.costs import CostModelSpec, CostParams
from sim.config.errors import ScenarioError
from sim.config.json_schema import scenario_json_schema
from sim.config.loader import apply_override, load_scenario, validate_scenario
from sim.config.scenario import Scenario
from sim.config.workload import WorkloadSpec

__all__ = [
    "CostModelSpec",
    "CostParams",
    "Scenario",
    "ScenarioError",
    "WorkloadSpec",
    "apply_override",
    "load_scenario",
    "scenario_json_schema",
    "validate_scenario",
]
