"""One construction path: constructors name what they need from the run, params give
the rest, and every mistake is one line."""

from __future__ import annotations

import numpy as np
import pytest

from policies.context import (
    CONTEXT_FIELDS,
    SLO,
    PolicyContext,
    PolicyError,
    ServedTokens,
    build_policy,
    check_params,
    context_parameters,
)
from policies.registry import Registry, UnknownPolicy

FAMILY: Registry = Registry("test")


@FAMILY.register("needs-slo")
class NeedsSlo:
    def __init__(self, slo: SLO, block_size: int, margin: float = 0.5):
        self.slo, self.block_size, self.margin = slo, block_size, margin


@FAMILY.register("draws")
class Draws:
    def __init__(self, rng: np.random.Generator):
        self.first = float(rng.random())


@FAMILY.register("picky")
class Picky:
    def __init__(self, level: int = 1):
        if level < 0:
            raise ValueError(f"level must be >= 0, got {level}")


@FAMILY.register("counts")
class Counts:
    def __init__(self, served_tokens: ServedTokens):
        self.served_tokens = served_tokens


CONTEXT = PolicyContext.standalone(block_size=32, slo=SLO(1.5, 0.05))


def test_context_fields_go_by_parameter_name_and_params_fill_the_rest():
    policy = build_policy(FAMILY, "needs-slo", {"margin": 2.0}, CONTEXT)
    assert (policy.slo, policy.block_size, policy.margin) == (SLO(1.5, 0.05), 32, 2.0)
    assert context_parameters(NeedsSlo) == {"slo", "block_size"}
    assert context_parameters(Picky) == frozenset()


def test_each_policy_gets_its_own_generator_seeded_by_the_run():
    a = build_policy(FAMILY, "draws", {}, CONTEXT)
    b = build_policy(FAMILY, "draws", {}, CONTEXT)
    other = build_policy(FAMILY, "draws", {}, PolicyContext.standalone(seed=7))
    assert a.first == b.first != other.first


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("needs-slo", {"slo": SLO(1, 1)}, "'slo' is given by the run, not by params"),
        ("needs-slo", {"marign": 1}, "unexpected parameter 'marign' (takes: margin)"),
        ("picky", {"level": -1}, "level must be >= 0, got -1"),
        ("counts", {}, "asks for 'served_tokens', which a test policy is not given"),
    ],
)
def test_mistakes_are_one_line_without_the_policy_name(name, params, message):
    with pytest.raises(PolicyError) as err:
        build_policy(FAMILY, name, params, CONTEXT)
    assert str(err.value) == message  # the caller prefixes section and policy, once


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(UnknownPolicy, match="valid: counts, draws, needs-slo, picky"):
        build_policy(FAMILY, "nope", {}, CONTEXT)


def test_params_are_checked_without_building():
    check_params(NeedsSlo, {"margin": 1.0})
    with pytest.raises(PolicyError, match="'rng' is given by the run"):
        check_params(Draws, {"rng": 1})
    assert {"rng", "slo", "requests", "served_tokens", "num_blocks"} <= CONTEXT_FIELDS


def test_served_tokens_counts_prompt_and_decode_tokens_per_tenant():
    served = ServedTokens()
    served.add(3, 100)
    served.add_each(np.array([3, 1, 3], dtype=np.int64))
    assert (served(3), served(1), served(0)) == (102, 1, 0)
