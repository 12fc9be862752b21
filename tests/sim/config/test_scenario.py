"""The scenario schema and loader: defaults, presets, overrides, one-line errors, and
every shipped scenario."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from sim.catalog.pool import kv_pool_blocks
from sim.catalog.presets import HARDWARE_PRESETS, MODEL_PRESETS
from sim.config.errors import ScenarioError
from sim.config.loader import load_scenario, validate_scenario
from sim.config.scenario import Scenario
from sim.run.build import build_allocator, policy_context, replica_policies
from sim.workload.generate import generate_requests

REPO = Path(__file__).resolve().parents[3]
SHIPPED = sorted(p for p in (REPO / "scenarios").rglob("*.yaml") if p.parent.name != "sweeps")


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def load_error(path: Path, overrides=()) -> str:
    with pytest.raises(ScenarioError) as info:
        load_scenario(path, overrides)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message


# --- defaults and presets ----------------------------------------------------------------


def test_a_three_line_scenario_gets_the_documented_defaults(tmp_path):
    path = write(tmp_path, "model: llama-3-8b\nhardware: h100-sxm\nworkload: {input: 64}\n")
    s = load_scenario(path)
    assert s.name == "s"  # the file's stem
    assert s.model == MODEL_PRESETS["llama-3-8b"]
    assert s.hardware == HARDWARE_PRESETS["h100-sxm"]
    assert (s.tensor_parallel, s.cache.block_size, s.cache.num_blocks) == (1, 16, None)
    assert (s.cache.allocator, s.cache.prefix_caching) == ("paged", False)
    assert (s.scheduler.policy, s.scheduler.max_num_seqs) == ("fcfs", 256)
    # vLLM V1's rules (scheduler.engine: vllm-v1, the default)
    assert (s.scheduler.engine, s.scheduler.batching.policy) == ("vllm-v1", "vllm-v1")
    assert (s.scheduler.max_num_batched_tokens, s.scheduler.watermark) == (8192, 0.0)
    assert s.scheduler.chunked_prefill is True
    assert s.scheduler.admission.policy == "whole-sequence"
    assert (s.preemption.mode.policy, s.preemption.victim) == ("recompute", "last-admitted")
    assert (s.eviction.policy, s.routing.router, s.routing.replicas) == ("lru", "round-robin", 1)
    assert (s.slo.ttft_s, s.slo.tpot_s) == (2.0, 0.2)
    assert (s.simulation.num_requests, s.simulation.seed) == (1000, 0)
    assert (s.backend.kind, s.cost_model.kind) == ("model", "analytic")
    assert s.workload.input.value == 64


def test_empty_mapping_is_a_valid_scenario():
    assert validate_scenario({}).model.name == "llama-3-8b"


def test_presets_explicit_shapes_and_preset_overrides_resolve():
    tiny = MODEL_PRESETS["tiny"].model_dump()
    s = validate_scenario({"model": tiny, "hardware": "a100-40gb"})
    assert s.model == MODEL_PRESETS["tiny"] and s.hardware.name == "a100-40gb"
    s = validate_scenario({"model": {"preset": "opt-13b", "max_model_len": 1024}})
    assert s.model.max_model_len == 1024 and s.model.num_layers == 40


def test_pool_size_explicit_or_derived_from_memory():
    s = validate_scenario({"model": "opt-13b", "hardware": "a100-40gb"})
    derived = kv_pool_blocks(MODEL_PRESETS["opt-13b"], HARDWARE_PRESETS["a100-40gb"])
    # vLLM's null block (the default vllm-v1 engine) holds no KV
    assert s.cache.device_blocks(s.model, s.hardware, 1) == derived == s.kv_pool.device_blocks + 1
    s = validate_scenario({"cache": {"num_blocks": 77, "gpu_memory_utilization": 0.5}})
    assert s.cache.device_blocks(s.model, s.hardware, 1) == 77 == s.kv_pool.device_blocks + 1
    # The pool is sized once, at validation; the allocator is built from that figure.
    assert build_allocator(s).num_blocks == 76
    own = validate_scenario({"scheduler": {"engine": "pagesim"}, "cache": {"num_blocks": 77}})
    assert own.kv_pool.device_blocks == build_allocator(own).num_blocks == 77
    s = validate_scenario({"tensor_parallel": 2, "cache": {"cpu_swap_gib": 4}})
    assert s.kv_pool == (s.cache.device_blocks(s.model, s.hardware, 2) - 1, 4096, ())


def test_cpu_blocks_from_gib_or_explicit():
    s = validate_scenario({"model": "llama-3-8b", "cache": {"cpu_swap_gib": 4}})
    # 32 layers x K and V x 4 of 8 KV heads (tp 2) x 128 dims x 2 bytes = 64 KiB a token,
    # so a 16-token block is 1 MiB and 4 GiB holds 4096 of them.
    assert s.cache.cpu_blocks(s.model, 2) == 4096
    s = validate_scenario({"cache": {"num_cpu_blocks": 12}})
    assert s.cache.cpu_blocks(s.model) == 12
    assert validate_scenario({}).cache.cpu_blocks(s.model) == 0


def test_dump_is_json_and_reloads_to_the_same_scenario(tmp_path):
    path = write(tmp_path, "model: opt-13b\nworkload: {input: alpaca, output: alpaca}\n")
    dump = load_scenario(path).model_dump(mode="json")
    text = json.dumps(dump, sort_keys=True)  # plain JSON: no numpy or path objects left
    assert json.loads(text)["model"]["num_layers"] == 40
    # What the run directory records is a complete scenario: loading it gives it back.
    assert validate_scenario(json.loads(text)).model_dump(mode="json") == dump


# --- overrides ----------------------------------------------------------------------------


def test_overrides_are_typed_nested_and_create_sections(tmp_path):
    path = write(tmp_path, "model: llama-3-8b\n")
    s = load_scenario(
        path,
        [
            "cache.prefix_caching=true",
            "cache.block_size=32",
            "workload.arrival.rate_rps=0.5",
            "scheduler.policy=priority",
            "scheduler.params.aging_s=2.5",
            "model=opt-13b",
            "hardware=a100-80gb",
            "name=renamed",
        ],
        seed=9,
    )
    assert s.cache.prefix_caching is True and s.cache.block_size == 32
    assert s.workload.arrival.rate_rps == 0.5
    assert s.scheduler.params == {"aging_s": 2.5}
    assert (s.model.name, s.hardware.name, s.name) == ("opt-13b", "a100-80gb", "renamed")
    assert s.simulation.seed == 9


def test_override_expands_a_preset_to_set_one_field(tmp_path):
    path = write(tmp_path, "model: opt-13b\nworkload: {input: 12}\n")
    s = load_scenario(path, ["model.max_model_len=512", "workload.input.value=7"])
    assert (s.model.name, s.model.max_model_len, s.model.num_layers) == ("opt-13b", 512, 40)
    assert s.workload.input.value == 7


@pytest.mark.parametrize(
    "override, expected",
    [
        (
            "workload.arival.rate_rps=3",
            "--set workload.arival.rate_rps: unknown field 'arival'; did you mean 'arrival'?",
        ),
        ("cache.block_size.x=3", "cache.block_size is a value, not a section"),
        ("cache", "expected KEY.PATH=VALUE"),
        ("cache.block_size=-4", "cache.block_size: expected greater than or equal to 1, got -4"),
    ],
)
def test_bad_overrides_give_one_line(tmp_path, override, expected):
    path = write(tmp_path, "model: tiny\ncache: {num_blocks: 64}\n")
    assert expected in load_error(path, [override])


# --- one-line errors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "scheduler: {policy: fcsf}\n",
            "scheduler.policy: unknown scheduler policy 'fcsf'; did you mean 'fcfs'? (valid: ",
        ),
        ("eviction: {policy: lru2}\n", "eviction.policy: unknown eviction policy 'lru2'"),
        (
            "workload:\n  arrival: {kind: poisson, rate_rps: -2}\n",
            "workload.arrival.rate_rps: expected greater than 0, got -2",
        ),
        (
            "workload:\n  arrival: {kind: poisson}\n",
            "workload.arrival.rate_rps: required field missing",
        ),
        (
            "workload:\n  input: {kind: uniform, min: 3}\n",
            "workload.input.max: required field missing",
        ),
        (
            "workload:\n  arrival: {kind: poisson, rate_rp: 2}\n",
            "workload.arrival.rate_rp: unknown field; did you mean 'rate_rps'?",
        ),
        ("cahce: {block_size: 8}\n", "cahce: unknown field; did you mean 'cache'?"),
        (
            "workload:\n  arrival: {kind: poison, rate_rps: 2}\n",
            "workload.arrival.kind: unknown kind 'poison'; did you mean 'poisson'?",
        ),
        ("model: llama-3-8\n", "model: unknown model preset 'llama-3-8'; did you mean"),
        (
            "model: {preset: tiny, num_layer: 3}\n",
            "model.num_layer: unknown field; did you mean 'num_layers'",
        ),
        ("cache: {block_size: many}\n", "cache.block_size: expected a valid integer"),
        ("cache: {allocator: buddy}\n", "cache.allocator: expected 'paged', 'contiguous-max'"),
        (
            "workload:\n  input: gpt4\n",
            "workload.input: expected 'sharegpt' or 'alpaca', got 'gpt4'",
        ),
        ("model: tiny\ncache: {block_size: 16\n", "line 3: invalid YAML"),
        ("- just\n- a list\n", "(top level): expected a mapping of sections"),
        (
            "workload:\n  arrival: {kind: trace, format: azure-csv, path: nowhere.csv}\n",
            "workload.arrival.path: file not found: nowhere.csv",
        ),
        (
            "preemption: {mode: swap}\n",
            "preemption.mode: swap needs CPU space",
        ),
        (
            "cache: {allocator: contiguous-max, prefix_caching: true}\n",
            "cache.prefix_caching: prefix caching needs the paged allocator",
        ),
        ("model: llama-3-70b\nhardware: l4\n", "tensor_parallel: 'llama-3-70b' does not leave"),
        (
            "simulation: {num_requests: 10, warmup_requests: 10}\n",
            "simulation.warmup_requests: expected fewer than num_requests (10), got 10",
        ),
        (
            "simulation: {num_requests: null, duration_s: null}\n",
            "simulation.num_requests: set num_requests or duration_s",
        ),
    ],
)
def test_each_mistake_is_one_line_naming_file_and_field(tmp_path, text, expected):
    assert expected in load_error(write(tmp_path, text))


def test_several_mistakes_are_counted(tmp_path):
    text = "cache: {block_size: 0, num_blocks: -1}\n"
    assert load_error(write(tmp_path, text)).endswith("(+1 more)")


def test_unreadable_scenario_file(tmp_path):
    assert "cannot read the scenario" in load_error(tmp_path / "missing.yaml")


def test_bad_trace_row_names_trace_file_line_and_column(tmp_path):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "t.csv").write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,12,3\n"
        "2023-11-16 18:15:47.1,12,many\n"
    )
    path = write(
        tmp_path, "workload:\n  arrival: {kind: trace, format: azure-csv, path: traces/t.csv}\n"
    )
    message = load_error(path)
    assert "workload.arrival.path: " in message
    assert "t.csv:3: GeneratedTokens: expected a non-negative integer, got 'many'" in message


# --- paths ----------------------------------------------------------------------------------


def test_relative_paths_resolve_against_the_scenario_file(tmp_path, monkeypatch):
    data = tmp_path / "scen"
    data.mkdir()
    (data / "lengths.txt").write_text("5\n9\n")
    path = write(
        data,
        "model: tiny\ncache: {num_blocks: 64}\n"
        "workload: {input: {kind: empirical, path: lengths.txt, column: 0}, output: 3}\n",
    )
    monkeypatch.chdir(tmp_path)  # somewhere else
    s = load_scenario(path)
    assert s.workload.input.path == "lengths.txt"  # kept as written
    assert s.workload.input.resolved_path == (data / "lengths.txt").resolve()
    requests = generate_requests(s, s.model, num_requests=50, rng=np.random.default_rng(0))
    assert {r.prompt_len for r in requests} == {5, 9}


# --- shipped scenarios ------------------------------------------------------------------------


def test_the_expected_scenarios_are_shipped():
    names = {p.relative_to(REPO / "scenarios").as_posix() for p in SHIPPED}
    for required in [
        "default.yaml",
        "tiny.yaml",
        "shared-prompt.yaml",
        "bursty.yaml",
        "parallel-sampling.yaml",
        "long-context.yaml",
        "trace-azure.yaml",
        "trace-mooncake.yaml",
        "paged-vs-contiguous/sharegpt-oracle.yaml",
        "paged-vs-contiguous/alpaca-pow2.yaml",
    ]:
        assert required in names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_shipped_scenario_loads_and_dumps_without_absolute_paths(path):
    scenario = load_scenario(path)
    assert isinstance(scenario, Scenario)
    dumped = json.dumps(scenario.model_dump(mode="json"))
    assert str(REPO) not in dumped
    requests = generate_requests(
        scenario, scenario.model, num_requests=20, rng=np.random.default_rng(0)
    )
    assert len(requests) == 20
    assert all(r.prompt_len + r.output_len <= scenario.model.max_model_len for r in requests)


def test_every_policy_family_takes_params_from_its_section(tmp_path):
    s = validate_scenario(
        {
            "cache": {"prefix_caching": True, "num_blocks": 64},
            "eviction": {"policy": "reuse-weighted", "params": {"half_life": 77}},
            "preemption": {"victim": "slo-aware", "mode": {"policy": "recompute"}},
            "scheduler": {"policy": "edf", "params": {"late": "keep"}, "admission": "first-chunk"},
        }
    )
    assert build_allocator(s).evictor.half_life == 77
    assert s.model_dump(mode="json")["scheduler"]["admission"] == "first-chunk"
    policies = replica_policies(s, policy_context(s, replica=0))
    assert policies.scheduler.late_last is False and policies.admission.whole_prompt is False
    assert policies.victim.slo.ttft_s == s.slo.ttft_s


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            {"eviction": {"policy": "lru", "params": {"half_life": 1}}},
            "eviction.params: lru: unexpected parameter 'half_life' (takes: none)",
        ),
        (
            {"preemption": {"victim": "most-blocks", "params": {"rng": 1}}},
            "preemption.params: most-blocks: 'rng' is given by the run, not by params",
        ),
        (
            {"scheduler": {"batching": {"policy": "static", "params": {"size": 4}}}},
            "scheduler.batching.params: static: unexpected parameter 'size' (takes: none)",
        ),
        (
            {"scheduler": {"admission": "first-chnk"}},
            "scheduler.admission: unknown admission policy 'first-chnk'; did you mean",
        ),
    ],
)
def test_bad_policy_params_are_one_line_naming_section_and_policy(section, message):
    with pytest.raises(ScenarioError) as err:
        validate_scenario(section)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("typed", "hint"),
    [
        ("h100", "did you mean 'h100-sxm'?"),
        ("a100", "did you mean one of 'a100-40gb', 'a100-80gb'?"),
        ("a1OO-80gb", "did you mean 'a100-80gb'?"),
    ],
)
def test_did_you_mean_prefers_names_that_start_with_what_was_typed(typed, hint):
    with pytest.raises(ScenarioError, match=hint):
        validate_scenario({"hardware": typed})


@pytest.mark.parametrize("tp", [3, 2**40])
def test_an_uneven_tensor_parallel_split_is_refused_with_an_explicit_pool_too(tp):
    """An explicit ``cache.num_blocks`` skips the memory sizing, not the heads' split."""
    with pytest.raises(ScenarioError, match="tensor_parallel: tensor_parallel=.* must divide"):
        validate_scenario(
            {
                "model": "tiny",
                "tensor_parallel": tp,
                "cache": {"num_blocks": 64},
                "simulation": {"num_requests": 10},
            }
        )


def test_an_explicit_pool_must_fit_the_gpu_memory_beside_the_weights():
    """A given ``cache.num_blocks`` skips the sizing, not physics: weights that do not fit
    one GPU blame tensor_parallel, blocks that do not fit beside them blame num_blocks, and
    the bound is the whole memory (a pool vLLM logged at 0.9 still fits)."""
    base = {"model": "llama-3-70b", "hardware": "h100-sxm", "simulation": {"num_requests": 10}}
    with pytest.raises(ScenarioError, match=r"tensor_parallel: 64 blocks .* 141\.\d+ GB"):
        validate_scenario({**base, "cache": {"num_blocks": 64}})
    with pytest.raises(ScenarioError, match="cache.num_blocks: 1,000,000 blocks"):
        validate_scenario({**base, "tensor_parallel": 4, "cache": {"num_blocks": 10**6}})
    derived = validate_scenario({**base, "tensor_parallel": 4})
    most = derived.kv_pool.device_blocks + 1  # what vLLM's own sizing leaves, null block back
    given = validate_scenario({**base, "tensor_parallel": 4, "cache": {"num_blocks": most}})
    assert given.kv_pool.device_blocks == derived.kv_pool.device_blocks
    # fp8 KV halves a block: twice vLLM's pool fits in fp8 where it does not in bf16
    tp4 = {**base, "tensor_parallel": 4}
    with pytest.raises(ScenarioError, match="cache.num_blocks"):
        validate_scenario({**tp4, "cache": {"num_blocks": 2 * most}})
    assert validate_scenario({**tp4, "cache": {"num_blocks": 2 * most, "kv_dtype": "fp8"}})


def test_every_reader_error_is_a_user_error_the_cli_reports_in_one_line():
    from sim.cli.common import UsageError
    from sim.config.budget import OverBudget
    from sim.config.hf_config import ConfigError
    from sim.costs.calibrated import CalibrationError
    from sim.costs.vidur import ProfileError
    from sim.inputs.tables import LengthTableError
    from sim.inputs.traces import TraceError
    from sim.inputs.user_errors import UserError
    from sim.recorded.run import RecordError
    from sim.run.folders import FolderExists
    from sim.workload.generate import WorkloadError

    kinds = (
        UsageError,
        OverBudget,
        ConfigError,
        LengthTableError,
        TraceError,
        ScenarioError,
        CalibrationError,
        ProfileError,
        RecordError,
        FolderExists,
        WorkloadError,
    )
    assert all(issubclass(kind, UserError) for kind in kinds)


def test_overriding_a_presets_memory_is_not_ignored():
    """The pool is sized from the memory CUDA reports (a preset's measurement of its
    card); a scenario that sets mem_capacity_bytes describes another card, so that
    measurement goes unless it is set too."""
    base = {"model": "llama-3-8b", "simulation": {"num_requests": 10}}
    stock = validate_scenario({**base, "hardware": "h100-sxm"})
    bigger = validate_scenario(
        {**base, "hardware": {"preset": "h100-sxm", "mem_capacity_bytes": 120 * 10**9}}
    )
    assert bigger.hardware.cuda_memory_bytes is None
    assert bigger.kv_pool.device_blocks > stock.kv_pool.device_blocks
    with pytest.raises(ScenarioError, match="does not leave room for KV blocks"):
        validate_scenario({**base, "hardware": {"preset": "h100-sxm", "mem_capacity_bytes": 1000}})
    both = validate_scenario(
        {
            **base,
            "hardware": {
                "preset": "h100-sxm",
                "mem_capacity_bytes": 120 * 10**9,
                "cuda_memory_bytes": 121 * 10**9,
            },
        }
    )
    assert both.hardware.cuda_memory_bytes == 121 * 10**9


def test_the_real_backend_refuses_what_it_cannot_run_in_one_line():
    base = {"simulation": {"num_requests": 5}, "backend": {"kind": "torch"}}
    with pytest.raises(ScenarioError, match="model.head_dim: .* expected an even head_dim"):
        validate_scenario(
            {**base, "model": {"preset": "tiny", "head_dim": 15}, "cache": {"num_blocks": 64}}
        )
    # its weights and pool are allocated in this process: priced before anything is built
    # (on a GPU the weights fit: 141 GB of llama-3-70b in a B200's 192 GB)
    with pytest.raises(ScenarioError, match="backend.kind: the run would need about"):
        validate_scenario(
            {**base, "model": "llama-3-70b", "hardware": "b200", "cache": {"num_blocks": 64}}
        )
    assert validate_scenario({**base, "model": "tiny", "cache": {"num_blocks": 64}})


def test_every_combination_refused_names_a_field_of_the_scenario():
    """The table of settings that do not work together (sim/config/combinations.py) is
    the one place they are refused; each row points at a field a user can change."""
    from sim.config.combinations import UNSUPPORTED

    for row in UNSUPPORTED:
        section, _, rest = row.field.partition(".")
        assert section in Scenario.model_fields, row.field
        if rest:
            spec = Scenario.model_fields[section].annotation
            assert rest.split(".")[0] in spec.model_fields, row.field


def test_the_real_backend_with_a_contiguous_allocator_is_refused_when_loaded(tmp_path):
    """It was refused only when the run was built, after validation said yes."""
    path = write(
        tmp_path,
        "model: tiny\ncache: {allocator: contiguous-pow2, num_blocks: 64}\n"
        "backend: {kind: torch}\nsimulation: {num_requests: 4}\n",
    )
    with pytest.raises(ScenarioError, match=r"backend\.kind: torch reads KV through block"):
        load_scenario(path)
