"""Models from a HuggingFace config.json (``model: {config: PATH}``, sim/config/hf_config.py).

The shipped scenarios/models/<preset>.json are each preset's public config.json; read
through a scenario, each must give the preset's model field for field, the same
scenario.json (but for what only a config carries), the same KV pool and the same step
times and run outputs.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from backend.step import Batch, PrefillChunk
from backend.transfer import CPU, GPU, Transfer
from sim.catalog.hardware import ModelSpec
from sim.catalog.presets import (
    MODEL_PRESETS,
    MODEL_SOURCES,
    SHIPPED_CONFIGS,
    shipped_config_for,
)
from sim.cli import main
from sim.config.errors import ScenarioError
from sim.config.loader import load_scenario, validate_scenario
from sim.run.build import analytic_executor

ROOT = Path(__file__).resolve().parents[3]
MODELS = ROOT / "scenarios" / "models"

#: What each shipped config.json carries beyond its preset: the public files' rope_theta
#: (Qwen2.5-7B writes a 131072-token window but switches it off with use_sliding_window:
#: false; the mistral-7b preset has Mistral-7B-v0.1's 4096-token window, as its file).
EXTRAS = {
    "llama-3-8b": {"rope_theta": 500000.0},
    "llama-3-70b": {"rope_theta": 500000.0},
    "mistral-7b": {"rope_theta": 10000.0},
    "qwen2.5-7b": {"rope_theta": 1000000.0},
    "opt-13b": {},
    "opt-66b": {},
    "tiny": {"rope_theta": 500000.0},
}
CONFIG_ONLY = {"config", "rope_theta", "rope_scaling"}
#: GPU and tensor parallelism that hold each preset's weights with room for KV.
PLACEMENT = {"llama-3-70b": ("h100-sxm", 4), "opt-66b": ("h100-sxm", 4)}

LLAMA = json.loads((MODELS / "llama-3-8b.json").read_text())


def scenario_file(folder: Path, model, preset: str = "", **sections) -> Path:
    hardware, tp = PLACEMENT.get(preset, ("h100-sxm", 1))
    raw = {"name": "s", "model": model, "hardware": hardware, "tensor_parallel": tp}
    raw["simulation"] = {"num_requests": 30}
    raw.update(sections)
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def from_config(folder: Path, config: dict, file: str = "cfg.json", **model_fields):
    (folder / file).write_text(json.dumps(config))
    return validate_scenario(
        {"model": {"config": file, **model_fields}, "cache": {"num_blocks": 64}},
        "s.yaml",
        base_dir=folder,
    ).model


def error_of(folder: Path, config, **model_fields) -> str:
    with pytest.raises(ScenarioError) as err:
        from_config(folder, config, **model_fields)
    return str(err.value)


# --- the presets' own config.json --------------------------------------------------------


def test_every_preset_has_a_shipped_config_and_a_source():
    presets = {p.stem for p in MODELS.glob("*.json")} - set(SHIPPED_CONFIGS)
    assert presets == set(MODEL_PRESETS) == set(MODEL_SOURCES)
    assert set(EXTRAS) == set(MODEL_PRESETS)


#: The shipped non-preset configs, read: (params in billions, layers, KV heads, max len).
SHIPPED_SHAPES = {
    "llama-2-7b": (6.74, 32, 32, 4096),
    "llama-2-70b": (68.98, 80, 8, 4096),
    "codellama-34b-instruct": (33.74, 48, 8, 16384),
    "llama-3.1-8b": (8.03, 32, 8, 131072),
    "qwen3-32b": (32.76, 64, 8, 40960),
    "mixtral-8x7b": (46.70, 32, 8, 32768),
    "qwen3-30b-a3b": (30.53, 48, 4, 40960),
    "qwen3-235b-a22b": (235.09, 94, 4, 40960),
    "qwen2-57b-a14b": (57.41, 28, 4, 131072),
    "deepseek-v2-lite": (15.71, 27, 16, 163840),
    "deepseek-v3": (671.03, 61, 128, 163840),
    # OpenAI's model card: 20.91B and 116.83B parameters (the attention biases and sinks
    # and the experts' biases are not counted here)
    "gpt-oss-20b": (20.91, 24, 8, 131072),
    "gpt-oss-120b": (116.79, 36, 8, 131072),
    "gemma-3-12b": (11.77, 48, 8, 131072),  # (its language model: no vision tower)
}


@pytest.mark.parametrize("stem", sorted(SHIPPED_CONFIGS))
def test_a_shipped_config_reads_as_its_model(stem):
    tp = 4 if stem == "qwen2-57b-a14b" else 8  # (28 heads)
    raw = {"model": {"config": f"models/{stem}.json"}, "hardware": "h200", "tensor_parallel": tp}
    model = validate_scenario(raw, base_dir=ROOT / "scenarios").model
    params, layers, kv_heads, max_len = SHIPPED_SHAPES[stem]
    assert round(model.num_params / 1e9, 2) == params
    shape = (model.num_layers, model.num_kv_heads, model.max_model_len)
    assert shape == (layers, kv_heads, max_len)
    assert shipped_config_for(SHIPPED_CONFIGS[stem][0].upper()) == stem


@pytest.mark.parametrize("preset", sorted(MODEL_PRESETS))
def test_a_presets_config_json_gives_the_preset_field_for_field(preset):
    config = f"models/{preset}.json"  # relative to the scenario's folder, scenarios/
    hardware, tp = PLACEMENT.get(preset, ("h100-sxm", 1))
    raw = {"model": {"config": config}, "hardware": hardware, "tensor_parallel": tp}
    model = validate_scenario(raw, base_dir=ROOT / "scenarios").model
    expected = MODEL_PRESETS[preset]
    compared = set(ModelSpec.model_fields) - CONFIG_ONLY
    assert compared | CONFIG_ONLY == set(ModelSpec.model_fields)  # every field is looked at
    for field in sorted(compared):
        assert getattr(model, field) == getattr(expected, field), field
    assert model.config == config
    carried = {f: getattr(model, f) for f in CONFIG_ONLY - {"config"}}
    assert carried == {"rope_theta": None, "rope_scaling": None} | (EXTRAS[preset])
    assert all(getattr(expected, f) is None for f in CONFIG_ONLY)


@pytest.mark.parametrize("preset", sorted(MODEL_PRESETS))
def test_a_presets_config_json_runs_exactly_like_the_preset(preset, tmp_path):
    """Same scenario.json but for what only a config carries, same KV pool, same step
    times for fixed batches, and byte-identical run outputs."""
    (tmp_path / "models").mkdir()
    copy = tmp_path / "models" / f"{preset}.json"  # named like the preset: so is the model
    copy.write_bytes((MODELS / f"{preset}.json").read_bytes())
    by_name = load_scenario(scenario_file(tmp_path / "models", preset, preset))
    (tmp_path / "cfg").mkdir()
    config = {"config": f"../models/{preset}.json"}
    by_config = load_scenario(scenario_file(tmp_path / "cfg", config, preset))
    dumps = [s.model_dump(mode="json") for s in (by_name, by_config)]
    for field in CONFIG_ONLY:
        dumps[1]["model"].pop(field, None)
    assert dumps[0] == dumps[1]
    assert by_name.kv_pool == by_config.kv_pool
    batch = Batch(
        prefills=(PrefillChunk(seq_id=0, start=256, token_ids=np.zeros(1000, dtype=np.int32)),),
        decode_seq_ids=np.arange(1, 65, dtype=np.int64),
        decode_context_lens=np.arange(100, 6500, 100, dtype=np.int64),
        decode_token_ids=np.zeros(64, dtype=np.int32),
        transfers=(Transfer(1, 2, CPU, GPU),),
    )
    times = [analytic_executor(s).execute(batch) for s in (by_name, by_config)]
    assert times[0] == times[1] > 0
    outputs = []
    for scenario, folder in ((by_name, "models"), (by_config, "cfg")):
        out = tmp_path / folder / "out"
        assert main(["run", scenario.source, "--out", str(out), "--quiet", "--no-report"]) == 0
        outputs.append([(out / f).read_bytes() for f in ("steps.csv", "summary.json")])
    assert outputs[0] == outputs[1]


def test_a_presets_dump_has_no_config_only_fields():
    """What a config carries appears in scenario.json only when set: an existing
    scenario's scenario.json is unchanged (tests/test_golden.py pins the bytes)."""
    dump = validate_scenario({"model": "llama-3-8b"}).model_dump(mode="json")["model"]
    assert not CONFIG_ONLY & set(dump)
    config = validate_scenario({"model": {"config": str(MODELS / "mistral-7b.json")}})
    dump = config.model_dump(mode="json")["model"]
    assert dump["sliding_window"] == 4096 and dump["config"] == str(MODELS / "mistral-7b.json")
    assert "rope_scaling" not in dump  # null in the file


# --- what is read, and how the other fields combine ---------------------------------------


def test_fields_beside_config_replace_the_files_and_are_not_read(tmp_path):
    bad_dtype = {**LLAMA, "torch_dtype": "complex64", "max_position_embeddings": None}
    model = from_config(tmp_path, bad_dtype, max_model_len=4096, dtype_bytes=1, name="mine")
    assert (model.max_model_len, model.dtype_bytes, model.name) == (4096, 1, "mine")
    assert model.num_layers == 32 and model.config == "cfg.json"


def test_defaults_of_absent_fields(tmp_path):
    bare = {k: v for k, v in LLAMA.items() if k not in ("num_key_value_heads", "torch_dtype")}
    model = from_config(tmp_path, {**bare, "tie_word_embeddings": None} | {"head_dim": None})
    assert model.num_kv_heads == 32 and model.head_dim == 128 and model.dtype_bytes == 2
    opt = json.loads((MODELS / "opt-13b.json").read_text())
    del opt["torch_dtype"]
    assert from_config(tmp_path, opt).tie_embeddings is True  # OPTConfig's default
    assert from_config(tmp_path, opt).mlp == "gelu"


def test_explicit_head_dim_need_not_divide_hidden(tmp_path):
    model = from_config(
        tmp_path,
        {
            **LLAMA,
            "hidden_size": 3072,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 256,
        },
    )
    assert model.head_dim == 256 and model.kv_bytes_per_token() == 2 * 32 * 8 * 256 * 2


def test_transformers_5_spellings(tmp_path):
    """``dtype`` replaced ``torch_dtype``; ``rope_parameters`` holds theta and scaling."""
    rope = {"rope_type": "llama3", "factor": 8.0, "rope_theta": 500000.0}
    newer = {k: v for k, v in LLAMA.items() if k not in ("torch_dtype", "rope_theta")}
    newer.update(dtype="float32", rope_parameters=rope, rope_scaling=None)
    model = from_config(tmp_path, newer)
    assert model.dtype_bytes == 4 and model.rope_theta == 500000.0
    assert model.rope_scaling == rope


def test_rope_scaling_and_a_switched_off_window(tmp_path):
    scaling = {"factor": 8.0, "rope_type": "llama3", "original_max_position_embeddings": 8192}
    model = from_config(tmp_path, {**LLAMA, "rope_scaling": scaling})
    assert model.rope_scaling == scaling
    qwen = json.loads((MODELS / "qwen2.5-7b.json").read_text())
    assert from_config(tmp_path, qwen).sliding_window is None
    assert from_config(tmp_path, {**qwen, "use_sliding_window": True}).sliding_window == 131072


def test_model_name_is_the_files_or_its_folders(tmp_path):
    assert from_config(tmp_path, LLAMA, "x.json", name="Llama 3").name == "Llama 3"
    assert from_config(tmp_path, LLAMA, "my-llama.json").name == "my-llama"
    (tmp_path / "Meta-Llama-3-8B").mkdir()
    model = from_config(tmp_path, LLAMA, "Meta-Llama-3-8B/config.json")
    assert model.name == "Meta-Llama-3-8B" and model.config == "Meta-Llama-3-8B/config.json"


def test_set_model_to_a_config_on_the_command_line(tmp_path):
    (tmp_path / "m.json").write_text(json.dumps(LLAMA))
    path = scenario_file(tmp_path, "tiny")
    scenario = load_scenario(path, ["model={config: m.json, max_model_len: 2048}"])
    assert scenario.model.num_layers == 32 and scenario.model.max_model_len == 2048
    with pytest.raises(ScenarioError, match=r"s\.yaml: model\.config: set preset or config"):
        load_scenario(path, ["model.config=m.json"])  # on top of the preset's name


# --- what is refused -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, key, message",
    [
        ({"num_local_experts": 8, "model_type": "qwen2"}, "num_local_experts", "mixture"),
        ({"kv_lora_rank": 512, "model_type": "llama"}, "kv_lora_rank", "latent"),
        (
            {"quantization_config": {"quant_method": "awq", "bits": 4}},
            "quantization_config.quant_method",
            "'awq': quantised weights are not modelled",
        ),
        (
            {"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 8},
            "num_experts_per_tok",
            "more than the 4 experts",
        ),
        (
            {"model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2},
            "moe_intermediate_size",
            "required field missing",
        ),
        (
            {
                "model_type": "qwen3_moe",
                "num_experts": 8,
                "num_experts_per_tok": 2,
                "moe_intermediate_size": 64,
                "mlp_only_layers": [0, 99],
            },
            "mlp_only_layers",
            "layer indices",
        ),
        ({"text_config": dict(LLAMA)}, "text_config", "multimodal"),
        ({"model_type": "lama"}, "model_type", "did you mean 'llama'"),
        ({"model_type": None}, "model_type", "required field missing"),
        ({"num_hidden_layers": None}, "num_hidden_layers", "required field null"),
        ({"vocab_size": 0}, "vocab_size", "expected a positive integer"),
        ({"hidden_size": 4096.0}, "hidden_size", "got 4096.0"),
        ({"num_attention_heads": True}, "num_attention_heads", "got True"),
        ({"num_attention_heads": 24}, "num_attention_heads", "does not divide hidden_size"),
        ({"num_key_value_heads": 5}, "num_key_value_heads", "does not divide"),
        ({"torch_dtype": "int4"}, "torch_dtype", "expected one of float32"),
        ({"rope_theta": -1}, "rope_theta", "positive number"),
        ({"rope_scaling": [8.0]}, "rope_scaling", "an object or null"),
        ({"tie_word_embeddings": "no"}, "tie_word_embeddings", "true or false"),
        ({"sliding_window": -4096}, "sliding_window", "positive integer"),
    ],
)
def test_bad_configs_are_one_line_naming_the_file_and_field(tmp_path, change, key, message):
    config = {k: v for k, v in {**LLAMA, **change}.items() if v is not None or k == key}
    if change.get(key, 0) is None and key == "model_type":
        del config[key]
    error = error_of(tmp_path, config)
    assert error.startswith(f"s.yaml: model.config: {tmp_path / 'cfg.json'}: {key}: ")
    assert message in error and "\n" not in error


def test_opt_with_an_embedding_projection_is_refused(tmp_path):
    opt = json.loads((MODELS / "opt-13b.json").read_text())
    error = error_of(tmp_path, {**opt, "word_embed_proj_dim": 512})
    assert "word_embed_proj_dim: 512 differs from hidden_size (5120)" in error


@pytest.mark.parametrize(
    "model, message",
    [
        ({"config": 3}, "expected the path of a config.json, got 3"),
        ({"config": " "}, "expected the path of a config.json"),
        ({"config": "cfg.json", "preset": "tiny"}, "set preset or config, not both"),
        ({"config": "missing.json"}, "missing.json: file not found"),
        ({"config": "cfg.json", "num_layers": 0}, "model.num_layers"),
        ({"config": "cfg.json", "colour": 1}, "model.colour: unknown field"),
    ],
)
def test_bad_model_sections(tmp_path, model, message):
    (tmp_path / "cfg.json").write_text(json.dumps(LLAMA))
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate_scenario({"model": model}, "s.yaml", base_dir=tmp_path)


def test_a_relative_path_resolves_against_the_scenario_not_the_working_directory(
    tmp_path, monkeypatch
):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "m.json").write_text(json.dumps(LLAMA))
    path = scenario_file(tmp_path / "a", {"config": "m.json"})
    monkeypatch.chdir(tmp_path)  # no m.json here
    assert load_scenario(path).model.config == "m.json"
    (tmp_path / "m.json").write_text(json.dumps({**LLAMA, "num_hidden_layers": 1}))
    assert load_scenario(path).model.num_layers == 32


# --- pagesim list models ----------------------------------------------------------------------


def test_list_models_says_where_each_model_comes_from(tmp_path, capsys):
    (tmp_path / "mine.json").write_text(json.dumps({**LLAMA, "num_hidden_layers": 16}))
    assert main(["list", "models", str(tmp_path / "mine.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-1] == "source"
    rows = {" ".join(line.split()[:2]) + " " + line.split("  ")[-1].strip() for line in lines}
    for preset, source in MODEL_SOURCES.items():
        size = next(line for line in lines if line.startswith(f"{preset} ")).split()[1]
        assert f"{preset} {size} preset: {source}" in rows
        assert f"{preset} {size} config: scenarios/models/{preset}.json" in rows
    mine = next(line for line in lines if line.endswith(f"config: {tmp_path / 'mine.json'}"))
    assert mine.split()[:3] == ["mine", "4.5", "B"] and mine.split()[3] == "16"


def test_list_models_with_a_bad_config_is_one_line_exit_2(tmp_path, capsys):
    (tmp_path / "bad.json").write_text(json.dumps({**LLAMA, "model_type": "mistrall"}))
    assert main(["list", "models", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"pagesim: error: {tmp_path / 'bad.json'}: model_type: 'mistrall' is not " + (
        "supported; did you mean 'mistral'? (valid: deepseek_v2, deepseek_v3, gemma3_text, "
        "gpt_oss, llama, mistral, mixtral, opt, qwen2, qwen2_moe, qwen3, qwen3_moe)"
    )
    assert main(["list", "hardware", "x.json"]) == 2
