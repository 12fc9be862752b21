"""The commands that explain pagesim: --version, bare usage, list, init."""

from __future__ import annotations

import importlib.metadata

import pytest

from policies.scheduling import SCHEDULERS
from sim.catalog.presets import HARDWARE_PRESETS, MODEL_PRESETS
from sim.cli import main
from sim.config.loader import load_scenario


def out_of(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"pagesim {importlib.metadata.version('pagesim')}"


def test_bare_pagesim_prints_usage_with_every_command(capsys):
    code, out, _ = out_of(capsys)
    assert code == 2
    for command in ("run", "compare", "validate", "list", "schema", "init"):
        assert f"    {command} " in out


@pytest.mark.parametrize(
    ("what", "names"),
    [("models", MODEL_PRESETS), ("hardware", HARDWARE_PRESETS), ("policies", SCHEDULERS.names())],
)
def test_list_names_every_preset_and_policy(capsys, what, names):
    code, out, _ = out_of(capsys, "list", what)
    assert code == 0
    firsts = {line.split()[0] for line in out.splitlines() if line.strip()}
    assert set(names) <= firsts


def test_list_policies_shows_descriptions_and_params(capsys):
    _, out, _ = out_of(capsys, "list", "policies")
    line = next(line for line in out.splitlines() if line.strip().startswith("reuse-weighted"))
    assert "aged reuse count" in line
    assert "params: half_life=1024" in out and "eviction.policy (eviction):" in out
    assert "rng" not in out.split("params:")[1].split("\n")[0]  # context is not a param

    # the default engine (vllm-v1) preempts the running list's tail, not the newest arrival
    def victim(name):
        return next(x for x in out.splitlines() if x.strip().startswith(name + " "))

    assert "vLLM's default" not in victim("last-arrived") and "pagesim" in victim("last-arrived")
    assert "vLLM" in victim("last-admitted")


def test_list_scenarios_describes_the_shipped_ones(capsys):
    _, out, _ = out_of(capsys, "list", "scenarios")
    assert "scenarios/default.yaml" in out and "Llama-3-8B" in out


def test_init_writes_a_valid_commented_scenario(tmp_path, capsys):
    path = tmp_path / "mine.yaml"
    code, out, _ = out_of(capsys, "init", "mine", "--out", str(path))
    assert code == 0 and "pagesim run" in out
    assert load_scenario(path).name == "mine" and path.read_text().count("#") > 10
    code, _, err = out_of(capsys, "init", "mine", "--out", str(path))
    assert code == 2 and "exists; pass --force" in err


def test_schema_prints_or_writes_the_scenario_schema(tmp_path, capsys):
    import json

    from sim.config.json_schema import scenario_json_schema

    code, out, _ = out_of(capsys, "schema")
    assert code == 0 and json.loads(out) == scenario_json_schema()
    code, out, _ = out_of(capsys, "schema", "--out", str(tmp_path / "s.json"))
    assert code == 0 and json.loads((tmp_path / "s.json").read_text()) == scenario_json_schema()


def test_list_scenarios_describes_an_unreadable_file_instead_of_failing(
    tmp_path, monkeypatch, capsys
):
    from sim.cli import info

    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "latin1.yaml").write_bytes(b"description: caf\xe9\n")
    (tmp_path / "scenarios" / "list.yaml").write_text("- a\n- b\n")
    (tmp_path / "scenarios" / "ok.yaml").write_text("description: fine\n")
    monkeypatch.setattr(info, "SCENARIOS", tmp_path / "scenarios")
    assert main(["list", "scenarios"]) == 0
    out = capsys.readouterr().out
    assert "latin1.yaml" in out and "(cannot read:" in out and "not UTF-8" in out
    assert "list.yaml" in out and "fine" in out
