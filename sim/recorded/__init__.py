"""Recorded runs of real engines: import them, replay them, compare with them.

* :func:`import_run` reads a recorded run (a format's module each: ``inference_perf``,
  ``lifecycle``, ``bench_json`` for vllm-bench and sglang-bench, ``otel``, ``guidellm``) and
  writes its observed run folder with the scenario that replays it (:mod:`.folder`).
* :mod:`.stages` compares a simulation with a recorded run stage by stage.
* :mod:`.calibrate` fits the analytic model's physical efficiencies to recorded runs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from sim.recorded.run import EngineConfig, RecordedRun, RecordError

__all__ = ["FORMATS", "RecordError", "import_run", "read_recorded"]

FORMATS = ("inference-perf", "lifecycle", "vllm-bench", "sglang-bench", "otel", "guidellm")


def read_recorded(
    fmt: str,
    path: Path,
    *,
    engine: EngineConfig,
    model: str | None,
    hardware: str | None,
    metadata: Path | None = None,
    prompts: Path | None = None,
    benchmark: int | None = None,
) -> RecordedRun:
    """The recorded run at ``path`` in format ``fmt``; RecordError (one line) if it
    cannot be read as that format."""
    if not path.exists():
        raise RecordError(f"{path}: no such file or folder")
    if fmt == "inference-perf":
        from sim.recorded import inference_perf

        return inference_perf.read_run(path, engine=engine, model=model, hardware=hardware)
    if fmt == "lifecycle":
        from sim.recorded import lifecycle

        return lifecycle.read_run(
            path, engine=engine, model=model, hardware=hardware, metadata=metadata, prompts=prompts
        )
    if fmt in ("vllm-bench", "sglang-bench"):
        from sim.recorded import bench_json

        return bench_json.read_run(
            path, fmt, engine=engine, model=model, hardware=hardware, metadata=metadata
        )
    if fmt == "guidellm":
        from sim.recorded import guidellm

        return guidellm.read_run(
            path, engine=engine, model=model, hardware=hardware, benchmark=benchmark
        )
    if fmt == "otel":
        from sim.recorded import otel

        return otel.read_run(path, engine=engine, model=model, hardware=hardware)
    raise RecordError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


def import_run(
    fmt: str,
    path: Path,
    out: Path,
    *,
    model: str | None = None,
    hardware: str | None = None,
    engine_args: Path | None = None,
    metadata: Path | None = None,
    prompts: Path | None = None,
    engine_log: Path | None = None,
    benchmark: int | None = None,
    force: bool = False,
    html: bool = True,
    argv=None,
    source: str | None = None,
) -> dict[str, Any]:
    """Read the recorded run and write its folder at ``out``; returns its summary.
    ``source`` names where the run came from (default: ``path``); the files read are
    named relative to it. ``engine_log``: the engine's log, for what it says of the run
    (sim.recorded.engine_log: the prefix cache hit rate). Raises RecordError (one line)
    for a bad file, an unknown model or GPU."""
    from sim.recorded.engine_args import read_engine_args
    from sim.recorded.folder import import_folder
    from sim.recorded.models import resolve_hardware_name, resolve_model_source

    engine = read_engine_args(engine_args) if engine_args is not None else EngineConfig()
    run = read_recorded(
        fmt,
        path,
        engine=engine,
        model=model,
        hardware=None,
        metadata=metadata,
        prompts=prompts,
        benchmark=benchmark,
    )
    if hardware is not None:
        run = dataclasses.replace(run, hardware=hardware, hardware_guessed=run.hardware is None)
    if engine_log is not None:
        run = _with_engine_log(run, engine_log)
    run = _named(run, path, source)
    model_source = resolve_model_source(model or run.model)
    gpu = resolve_hardware_name(hardware or run.hardware)
    return import_folder(
        out, run, model=model_source, hardware=gpu, force=force, argv=argv, html=html
    )


def _named(run: RecordedRun, path: Path, source: str | None) -> RecordedRun:
    """``run`` with its source named ``source`` and its files relative to ``path``'s
    folder (so a run folder does not hold the importing machine's paths)."""
    base = path if path.is_dir() else path.parent
    files = {}
    for name, digest in run.files.items():
        try:
            files[str(Path(name).resolve().relative_to(base.resolve()))] = digest
        except ValueError:
            files[Path(name).name] = digest
    return dataclasses.replace(run, source=source or str(path), files=files)


def _with_engine_log(run: RecordedRun, path: Path) -> RecordedRun:
    """``run`` with what its engine's log says: the prefix cache hit rate, and the
    engine arguments it logged where the run did not record them; both noted."""
    from sim.recorded.engine_args import engine_config, merged
    from sim.recorded.engine_log import VLLM_HIT_RATE_REQUESTS, read_engine_log

    files = dict(run.files)
    log = read_engine_log(path, files)
    notes = []
    if log.prefix_hit_rate is not None:
        notes.append(
            f"engine log: {log.lines} stats line(s); the last gives a prefix cache hit rate "
            f"of {100 * log.prefix_hit_rate:.1f} % (vLLM's: over its last "
            f"{VLLM_HIT_RATE_REQUESTS:,} requests)"
        )
    engine = run.engine
    if log.arguments:
        engine = merged(engine_config(log.arguments, str(path)), run.engine)
        names = ", ".join(sorted(log.arguments))
        notes.append(f"engine log: its non-default args give {names}")
    return dataclasses.replace(
        run,
        files=files,
        prefix_hit_rate=log.prefix_hit_rate,
        engine=engine,
        notes=(*run.notes, *notes),
    )
