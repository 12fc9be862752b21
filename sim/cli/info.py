"""The commands that explain pagesim: ``list``, ``schema`` and ``init``.

``pagesim list models|hardware|policies|scenarios`` prints what a scenario can name (each
preset's key figures, each policy's one-line description and parameters, the shipped
scenarios; models also say where they come from: a preset's HuggingFace repository, or the
config.json file, shipped in scenarios/models/ or named on the command line); ``pagesim
schema`` the scenario JSON schema for editors; ``pagesim init NAME`` a commented starter
scenario.
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

from sim.cli.common import UsageError, output_file

#: Where the shipped scenarios are (a checkout's scenarios/ folder).
SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


#: Policy families in the order a scenario's sections name them.
def add_commands(subparsers) -> None:
    listing = subparsers.add_parser("list", help="what a scenario can name: presets, policies")
    listing.add_argument("what", choices=("models", "hardware", "policies", "scenarios"))
    listing.add_argument(
        "configs",
        nargs="*",
        metavar="CONFIG.json",
        help="with models: also show the model these HuggingFace config.json files describe",
    )
    listing.set_defaults(handler=cmd_list)

    schema = subparsers.add_parser("schema", help="the scenario JSON schema, for editors")
    schema.add_argument("--out", help="write it to this file instead of printing it")
    schema.set_defaults(handler=cmd_schema)

    init = subparsers.add_parser("init", help="write a commented starter scenario")
    init.add_argument("name", help="scenario name; writes NAME.yaml (or --out)")
    init.add_argument("--out", help="file to write (default: NAME.yaml)")
    init.add_argument("--force", action="store_true", help="replace an existing file")
    init.set_defaults(handler=cmd_init)


def cmd_list(args) -> int:
    if args.configs and args.what != "models":
        raise UsageError(f"list {args.what} takes no files (list models CONFIG.json... does)")
    if args.what == "models":
        lines = _models(args.configs)
    else:
        lines = {"hardware": _hardware, "policies": _policies, "scenarios": _scenarios}[args.what]()
    print("\n".join(lines))
    return 0


def _models(configs: list[str]) -> list[str]:
    """The presets (with the repository their figures come from), the shipped
    config.json files (scenarios/models/) and ``configs``, each with where it came from."""
    from sim.catalog.hardware import ModelSpec
    from sim.catalog.presets import MODEL_PRESETS, MODEL_SOURCES
    from sim.config.hf_config import ConfigError, read_model_config

    header = ("model", "params", "layers", "hidden", "heads q/kv", "KV/token", "max len", "source")
    rows = [header]
    for name, m in sorted(MODEL_PRESETS.items()):
        rows.append((*_model_row(m), f"preset: {MODEL_SOURCES[name]}"))
    shipped = sorted(SCENARIOS.glob("models/*.json"))
    files = [(str(p.relative_to(SCENARIOS.parent)), p) for p in shipped]
    for shown, path in [*files, *((c, Path(c).resolve()) for c in configs)]:
        try:
            m = ModelSpec.model_validate(read_model_config(path))
        except ConfigError as err:
            raise UsageError(str(err)) from None
        rows.append((*_model_row(m), f"config: {shown}"))
    return _table(rows)


def _model_row(m) -> tuple[str, ...]:
    params = _count(m.num_params)
    if (moe := m.moe) is not None:  # experts: the total, and what a token multiplies
        experts = f"{moe.num_experts}e top-{moe.experts_per_token}"
        params += f" ({_count(m.active_params)} active, {experts})"
    return (
        m.name,
        params,
        str(m.num_layers),
        str(m.hidden_size),
        f"{m.num_heads}/{m.num_kv_heads}",
        _kv_per_token(m),
        f"{m.max_model_len:,}",
    )


def _kv_per_token(m) -> str:
    """KV bytes a token takes in every layer; with sliding windows, in the full-attention
    layers, and the window the others keep (a long sequence's KV is then the former)."""
    kinds = dict(m.attention_kinds())
    if kinds.keys() == {None}:
        return _bytes(m.kv_bytes_per_token(1))
    window = min(w for w in kinds if w)
    if None not in kinds:  # every layer a window (Mistral-7B-v0.1)
        return f"{_bytes(m.kv_bytes_per_token(1))}, last {window}"
    full = m.kv_bytes_per_token(1) // m.num_layers * kinds[None]
    return f"{_bytes(full)} + {window}-token windows"


def _count(n: int) -> str:
    return f"{n / 1e9:.1f} B" if n >= 1e9 else f"{n / 1e6:.1f} M"


def _bytes(n: int) -> str:
    return f"{n / 1024:.0f} KiB" if n >= 1024 else f"{n} B"


def _hardware() -> list[str]:
    from sim.catalog.presets import HARDWARE_PRESETS

    rows = [("hardware", "memory", "bandwidth", "bf16 dense", "SMs", "host link")]
    for name, h in sorted(HARDWARE_PRESETS.items()):
        bf16 = h.flops.get("bf16")
        rows.append(
            (
                name,
                f"{h.mem_capacity_bytes / 1e9:.0f} GB",
                f"{h.mem_bandwidth_bytes_s / 1e12:.2f} TB/s",
                "-" if bf16 is None else f"{bf16 / 1e12:.0f} TFLOP/s",
                str(h.num_sms or "-"),
                f"{h.host_link_bytes_s / 1e9:.0f} GB/s",
            )
        )
    return _table(rows)


def _policies() -> list[str]:
    from policies.context import CONTEXT_FIELDS
    from policies.families import FAMILIES

    lines: list[str] = []
    for family, registry in FAMILIES.items():
        lines.append(f"{registry.field} ({family}):")
        for name in registry.names():
            factory = registry.get(name)
            doc = _first_sentence(inspect.getdoc(factory) or "")
            params = _params(factory, CONTEXT_FIELDS)
            lines.append(f"  {name:<22} {doc}")
            if params:
                lines.append(f"  {'':<22} params: {params}")
        lines.append("")
    return lines[:-1]


def _first_sentence(doc: str) -> str:
    text = " ".join(doc.split("\n\n")[0].split()).replace("``", "")
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def _params(factory, context_fields) -> str:
    """``name=default`` of the parameters a scenario's params may set."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return ""
    shown = []
    for p in parameters:
        if p.name in context_fields or p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            continue
        shown.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
    return ", ".join(shown)


def _scenarios() -> list[str]:
    import yaml

    from sim.inputs.textfile import read_text

    rows = [("scenario", "description")]
    for path in sorted(p for p in SCENARIOS.rglob("*.yaml") if p.parent.name != "sweeps"):
        try:
            raw = yaml.safe_load(read_text(path, ValueError))
        except (ValueError, yaml.YAMLError, RecursionError) as err:
            reason = str(err).splitlines()[0].removeprefix(f"{path}:").split(": ", 1)[-1]
            raw = {"description": f"(cannot read: {reason})"}
        raw = raw if isinstance(raw, dict) else {}
        description = " ".join(str(raw.get("description", "")).split())
        if len(description) > 90:
            description = description[:87] + "..."
        rows.append((str(path.relative_to(SCENARIOS.parent)), description))
    return _table(rows)


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def cmd_schema(args) -> int:
    from sim.config.json_schema import scenario_json_schema

    text = json.dumps(scenario_json_schema(), indent=2, sort_keys=True) + "\n"
    if args.out is None:
        print(text, end="")
        return 0
    _write(output_file(args.out, "--out"), text)
    print(f"wrote {args.out}")
    return 0


def _write(path: Path, text: str) -> None:
    """``text`` into ``path`` all at once (sim.run.folders.atomic_file)."""
    from sim.run.folders import atomic_file

    try:
        with atomic_file(path) as partial:
            partial.write_text(text, encoding="utf-8")
    except OSError as err:
        raise UsageError(f"{path}: cannot write: {err.strerror or err}") from None


STARTER = """\
# {name}: a pagesim scenario (pagesim run {file}). Every field has a default; this file
# names the ones most runs change. `pagesim list models|hardware|policies` shows what the
# names can be and `pagesim schema` the whole schema (with a description of each field).
name: {name}
description: what this scenario is for
model: llama-3-8b            # a preset, an explicit shape, or {{config: path/config.json}}
hardware: h100-sxm           # one GPU's datasheet; tensor_parallel GPUs per replica
tensor_parallel: 1
cache:
  block_size: 16             # tokens per KV block
  prefix_caching: false      # reuse KV of shared prompt prefixes
scheduler:
  policy: fcfs               # the order waiting requests are admitted in
  max_num_seqs: 256          # sequences running at once
  max_num_batched_tokens: 8192   # tokens per step (prefill chunks + decodes)
preemption:
  mode: recompute            # or swap (needs cache.cpu_swap_gib)
routing:
  replicas: 1
workload:
  arrival: {{kind: poisson, rate_rps: 10}}    # requests per second
  input: sharegpt            # prompt tokens: a dataset preset, a number, or a distribution
  output: sharegpt           # e.g. {{kind: lognormal, mean: 250, cv: 1.0}}
slo:
  ttft_s: 2.0                # time to first token
  tpot_s: 0.2                # time per output token
simulation:
  num_requests: 2000
  warmup_requests: 200       # excluded from latency figures
  seed: 0
"""


def cmd_init(args) -> int:
    import yaml

    from sim.config.errors import ScenarioError
    from sim.config.loader import validate_scenario

    out = output_file(args.out or f"{args.name}.yaml", "--out" if args.out else "NAME")
    if out.exists() and not args.force:
        raise UsageError(f"{out} exists; pass --force to replace it")
    text = STARTER.format(name=args.name, file=out)
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError:
        raw = None
    if not isinstance(raw, dict) or raw.get("name") != args.name:
        raise UsageError(
            f"{args.name!r}: not usable as a scenario name: YAML reads it as something else "
            "(use plain text such as my-scenario)"
        )
    if not str(out).isprintable():
        raise UsageError(f"{str(out)!r}: a file name with line breaks or control characters")
    try:
        validate_scenario(raw, str(out))  # the starter must always be a valid scenario
    except ScenarioError as err:
        raise RuntimeError(f"the starter scenario does not validate: {err}") from None
    _write(out, text)
    print(f"wrote {out}; run it with: {_invoked_as()} run {out}")
    return 0


def _invoked_as() -> str:
    """The command as the user typed it (``.venv/bin/pagesim``, or ``pagesim`` on the
    PATH), so a printed next step works in their shell as printed."""
    typed = sys.argv[0] if sys.argv else ""
    return typed if Path(typed).name == "pagesim" else ".venv/bin/pagesim"
