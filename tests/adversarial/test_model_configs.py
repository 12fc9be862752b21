"""Hostile HuggingFace config.json files through the real command line (issue 17,
"models from config.json").

Each case writes a scenario whose ``model`` is ``{config: cfg.json}`` (or hands the file
to ``pagesim list models``) in a folder of its own, runs the command in a subprocess
(tests/adversarial/cli.py) and checks the promise: exit code 2, no traceback, one stderr
line naming the config file and the field at fault, and nothing in the folder created,
changed or removed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.adversarial.cli import ROOT, Build, one_line_error, run_cases

LLAMA = json.loads((ROOT / "scenarios" / "models" / "llama-3-8b.json").read_text())
SCENARIO = {
    "hardware": "h100-sxm",
    "cache": {"block_size": 16, "num_blocks": 128},
    "scheduler": {"max_num_seqs": 16, "max_num_batched_tokens": 512},
    "simulation": {"num_requests": 20},
}

#: name -> build(folder) -> (command arguments, culprits the error line must name)
CASES: dict[str, Build] = {}


def case(build: Build) -> Build:
    CASES[build.__name__.replace("_", " ")] = build
    return build


def run_with(folder: Path, content: str | bytes | None, *, config: str = "cfg.json") -> list[str]:
    """``pagesim run`` of a scenario naming ``config``, written with ``content`` (None:
    leave the file alone)."""
    if isinstance(content, str):
        (folder / config).write_text(content)
    elif isinstance(content, bytes):
        (folder / config).write_bytes(content)
    (folder / "s.yaml").write_text(yaml.safe_dump({"model": {"config": config}, **SCENARIO}))
    return ["run", str(folder / "s.yaml"), "--out", str(folder / "out"), "--quiet", "--no-report"]


def llama(**changes) -> str:
    """Llama-3-8B's config.json with ``changes`` (a None value removes the key)."""
    config = {**LLAMA, **changes}
    return json.dumps({k: v for k, v in config.items() if v is not None})


def field_case(field: str, **changes) -> Build:
    """A case whose config.json is Llama's with ``changes``, blamed on ``field``."""

    def build(folder: Path):
        return run_with(folder, llama(**changes)), ["cfg.json", "model.config", field]

    return build


# --------------------------------------------------------------------- the file itself


@case
def not_json(d):
    return run_with(d, '{"model_type": "llama",'), ["cfg.json", "not JSON"]


@case
def empty_file(d):
    return run_with(d, ""), ["cfg.json", "not JSON"]


@case
def not_utf8(d):
    return run_with(d, llama().encode().replace(b'"llama"', b'"ll\xe9ma"')), ["cfg.json", "UTF-8"]


@case
def utf16(d):
    return run_with(d, llama().encode("utf-16")), ["cfg.json", "UTF-8"]


@case
def a_list(d):
    return run_with(d, json.dumps([LLAMA])), ["cfg.json", "(top level)", "a list"]


@case
def a_string(d):
    return run_with(d, '"llama"'), ["cfg.json", "(top level)"]


@case
def a_folder(d):
    (d / "cfg.json").mkdir()
    return run_with(d, None), ["cfg.json", "folder"]


@case
def path_that_does_not_exist(d):
    return run_with(d, None, config="models/nope.json"), ["nope.json", "not found"]


@case
def path_with_a_nul(d):
    return run_with(d, None, config="cfg\x00.json"), ["model.config", "null byte"]


@case
def path_too_long_for_the_file_system(d):
    return run_with(d, None, config="c" * 5000 + ".json"), ["model.config", "too long"]


@case
def nan_in_the_file(d):
    return run_with(d, llama().replace("500000.0", "NaN")), ["cfg.json", "NaN"]


@case
def a_number_of_200_digits(d):
    return run_with(d, llama().replace("4096", "9" * 200, 1)), ["cfg.json", "200 digits"]


@case
def nested_too_deeply(d):
    return run_with(d, '{"a": ' + "[" * 50_000 + "]" * 50_000 + "}"), ["cfg.json", "nested"]


@case
def larger_than_16_mib(d):
    padding = " " * (17 << 20)
    return run_with(d, llama()[:-1] + padding + "}"), ["cfg.json", "too large"]


# ------------------------------------------------------------------------- its fields

for _name, _field, _changes in [
    ("missing layers", "num_hidden_layers", {"num_hidden_layers": None}),
    ("missing vocabulary", "vocab_size", {"vocab_size": None}),
    ("missing model type", "model_type", {"model_type": None}),
    ("missing context", "max_position_embeddings", {"max_position_embeddings": None}),
    ("zero layers", "num_hidden_layers", {"num_hidden_layers": 0}),
    ("negative heads", "num_attention_heads", {"num_attention_heads": -32}),
    ("huge hidden size", "hidden_size", {"hidden_size": 10**40}),
    ("kv heads past int32", "num_key_value_heads", {"num_key_value_heads": 2**31}),
    ("float intermediate size", "intermediate_size", {"intermediate_size": 14336.5}),
    ("float vocabulary", "vocab_size", {"vocab_size": 128256.0}),
    ("bool layers", "num_hidden_layers", {"num_hidden_layers": True}),
    ("string head dim", "head_dim", {"head_dim": "128"}),
    ("heads not dividing hidden", "num_attention_heads", {"num_attention_heads": 24}),
    ("kv heads not dividing heads", "num_key_value_heads", {"num_key_value_heads": 5}),
    ("unknown dtype", "torch_dtype", {"torch_dtype": "int4"}),
    ("dtype not a string", "torch_dtype", {"torch_dtype": 16}),
    ("negative rope theta", "rope_theta", {"rope_theta": -1.0}),
    ("rope scaling a number", "rope_scaling", {"rope_scaling": 8}),
    ("zero sliding window", "sliding_window", {"sliding_window": 0}),
    ("tied embeddings a string", "tie_word_embeddings", {"tie_word_embeddings": "false"}),
    ("unsupported model type", "model_type", {"model_type": "gpt2"}),
    ("model type a list", "model_type", {"model_type": ["llama"]}),
    ("multimodal wrapper", "text_config", {"text_config": LLAMA, "model_type": "llava"}),
]:
    CASES[_name] = field_case(_field, **_changes)


@case
def mixtral_with_more_experts_a_token_than_it_has(d):
    mixtral = llama(model_type="mixtral", num_local_experts=2, num_experts_per_tok=4)
    return run_with(d, mixtral), ["cfg.json", "num_experts_per_tok", "more than the 2 experts"]


@case
def qwen_moe_whose_sparse_step_leaves_no_moe_layer(d):
    qwen = llama(
        model_type="qwen3_moe",
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        decoder_sparse_step=1000,
    )
    return run_with(d, qwen), ["cfg.json", "decoder_sparse_step", "no MoE layer"]


@case
def deepseek_with_first_dense_layers_past_the_last(d):
    deepseek = llama(
        model_type="deepseek_v2",
        n_routed_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        first_k_dense_replace=99,
        kv_lora_rank=64,
        qk_nope_head_dim=32,
        qk_rope_head_dim=16,
        v_head_dim=32,
    )
    return run_with(d, deepseek), ["cfg.json", "first_k_dense_replace", "expected 0 to 31"]


@case
def quantization_config_that_is_not_an_object(d):
    return run_with(d, llama(quantization_config=[4])), ["cfg.json", "quantization_config"]


@case
def awq_weights(d):
    awq = llama(quantization_config={"quant_method": "awq", "bits": 4})
    return run_with(d, awq), ["cfg.json", "quant_method", "'awq'"]


@case
def experts_in_a_dense_type(d):
    dense = llama(num_local_experts=32, num_experts_per_tok=4)
    return run_with(d, dense), ["cfg.json", "num_local_experts", "mixture-of-experts"]


@case
def layer_types_of_another_model(d):
    windows = llama(sliding_window=128, layer_types=["sliding_attention", "full_attention"] * 3)
    return run_with(d, windows), ["cfg.json", "layer_types", "num_hidden_layers is"]


@case
def chunked_local_attention(d):
    return run_with(d, llama(attention_chunk_size=8192)), ["cfg.json", "attention_chunk_size"]


@case
def qwen_moe_with_a_dense_type(d):
    qwen = llama(model_type="qwen2", num_experts=60, moe_intermediate_size=1408)
    return run_with(d, qwen), ["cfg.json", "num_experts", "mixture-of-experts"]


@case
def opt_with_an_embedding_projection(d):
    opt = json.loads((ROOT / "scenarios" / "models" / "opt-13b.json").read_text())
    opt.update(hidden_size=1024, num_attention_heads=16, word_embed_proj_dim=512)
    return run_with(d, json.dumps(opt)), ["cfg.json", "word_embed_proj_dim"]


# ------------------------------------------------------------- the scenario around it


@case
def preset_and_config(d):
    (d / "cfg.json").write_text(llama())
    raw = {"model": {"preset": "llama-3-8b", "config": "cfg.json"}, **SCENARIO}
    (d / "s.yaml").write_text(yaml.safe_dump(raw))
    return ["run", str(d / "s.yaml"), "--out", str(d / "out")], ["s.yaml", "model.config"]


@case
def config_not_a_path(d):
    (d / "s.yaml").write_text(yaml.safe_dump({"model": {"config": [1, 2]}, **SCENARIO}))
    return ["run", str(d / "s.yaml"), "--out", str(d / "out")], ["s.yaml", "model.config"]


@case
def an_override_out_of_range(d):
    (d / "cfg.json").write_text(llama())
    raw = {"model": {"config": "cfg.json", "max_model_len": -1}, **SCENARIO}
    (d / "s.yaml").write_text(yaml.safe_dump(raw))
    return ["run", str(d / "s.yaml"), "--out", str(d / "out")], ["s.yaml", "model.max_model_len"]


@case
def set_on_the_command_line(d):
    args = run_with(d, json.dumps([1]))
    (d / "s.yaml").write_text(yaml.safe_dump({"model": "tiny", **SCENARIO}))
    return [*args, "--set", "model={config: cfg.json}"], ["cfg.json", "(top level)"]


@case
def list_models_with_a_moe_config(d):
    (d / "moe.json").write_text(llama(num_local_experts=8))
    return ["list", "models", str(d / "moe.json")], ["moe.json", "num_local_experts"]


@case
def list_models_with_a_folder(d):
    return ["list", "models", str(d)], [str(d), "folder"]


@case
def list_hardware_with_a_file(d):
    return ["list", "hardware", str(d / "x.json")], ["list hardware"]


def _huge_moe(d: Path, shipped: str):
    """A shipped MoE config with 2^31 - 1 layers, on a pool sized from memory: refused at
    once for its weights (its dense layers are counted, not looped over: it hung)."""
    config = json.loads((ROOT / "scenarios" / "models" / shipped).read_text())
    config["num_hidden_layers"] = 2**31 - 1
    (d / "cfg.json").write_text(json.dumps(config))
    raw = {
        "model": {"config": "cfg.json"},
        "hardware": "h100-sxm",
        "simulation": {"num_requests": 20},
    }
    (d / "s.yaml").write_text(yaml.safe_dump(raw))
    return ["run", str(d / "s.yaml"), "--out", str(d / "out")], ["tensor_parallel", "weights"]


@case
def qwen3_moe_with_2_31_layers(d):
    return _huge_moe(d, "qwen3-30b-a3b.json")


@case
def deepseek_with_2_31_layers(d):
    return _huge_moe(d, "deepseek-v2-lite.json")


@case
def rope_scaling_nested_900_deep(d):
    nested: dict = {}
    inner = nested
    for _ in range(900):
        inner["a"] = {}
        inner = inner["a"]
    return run_with(d, json.dumps({**LLAMA, "rope_scaling": nested})), [
        "cfg.json",
        "rope_scaling",
        "nested",
    ]


# ---------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Every case built in its own folder and run, all at once (run_cases)."""
    return run_cases(CASES, lambda: tmp_path_factory.mktemp("config"))


def test_there_are_enough_cases():
    assert len(CASES) >= 40


@pytest.mark.parametrize("name", list(CASES))
def test_a_hostile_config_is_one_line_exit_2_and_writes_nothing(results, name):
    outcome = results[name]
    assert one_line_error(outcome.result, *outcome.culprits) == ""
    assert outcome.after == outcome.before, "the failed command created, changed or removed files"


def test_the_same_file_made_valid_runs(tmp_path):
    """The cases' scenario is sound: with Llama's own config.json it runs."""
    from tests.adversarial.cli import run_cli

    result = run_cli(run_with(tmp_path, llama()))
    assert result.returncode == 0, result.describe()
    assert json.loads((tmp_path / "out" / "scenario.json").read_text())["model"]["config"] == (
        "cfg.json"
    )
