"""Each policy family is described once, by its registry (policies.families): the field a
scenario names it at, where its parameters go, and what a built policy must have. The
validation, the builder and ``pagesim list`` read these descriptors."""

from __future__ import annotations

import pytest

from policies.families import FAMILIES
from sim.config.errors import ScenarioError
from sim.config.loader import validate_scenario
from sim.run.build import make_policy, policy_context


def test_every_family_names_its_field_and_shipped_policies_keep_its_contract():
    fields = [registry.field for registry in FAMILIES.values()]
    assert len(set(fields)) == len(fields) == 7
    for registry in FAMILIES.values():
        for name in registry.names():
            policy = registry.get(name)
            assert registry.missing_methods(policy) == [], (registry.family, name)
            # a shipped policy declares every flag, optional ones included
            for flag in registry.flags + registry.optional_flags:
                assert isinstance(getattr(policy, flag, None), bool), (registry.family, name, flag)


class QuietMode:
    chunks_prompts = True

    def compose(self, step):
        step.decodes()
        step.admit()


def test_a_plugin_leaving_out_an_optional_flag_reads_false_through_its_guard():
    """make_policy wraps a plug-in that leaves out decode_stretches so that the engine,
    which reads the flag without a default, gets False; its own flags pass through."""
    scenario = validate_scenario({"model": "tiny"})
    batching = FAMILIES["batching"]
    assert not hasattr(QuietMode(), "decode_stretches")
    built = make_policy(
        scenario, batching, f"{__name__}:QuietMode", {}, policy_context(scenario, replica=0)
    )
    assert built.decode_stretches is False and built.chunks_prompts is True


def test_the_builder_reads_the_params_field_from_the_descriptor():
    scenario = validate_scenario({"model": "tiny", "preemption": {"victim": "last-admitted"}})
    victims = FAMILIES["preemption"]
    assert victims.params_field == "preemption.params"
    context = policy_context(scenario, replica=0)
    assert callable(make_policy(scenario, victims, "last-admitted", {}, context).pick)
    with pytest.raises(ScenarioError, match=r": preemption\.params: last-admitted: "):
        make_policy(scenario, victims, "last-admitted", {"no_such": 1}, context)
