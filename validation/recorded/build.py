"""Rebuild the recorded-runs corpus (``validation/recorded/runs/``) from its public sources.

Every run is imported with ``pagesim import-run`` exactly as a user would import their
own; this script only says, per run, where its files are and what its source recorded
about the engine outside them. Each source is pinned to a commit and every file read is
named with its sha256 in the run's summary.json (``recorded.files``).

    git clone https://github.com/inference-sim/training && git -C training checkout ed5c1d2
    git clone https://github.com/casys-kaist/LLMServingSim && git -C LLMServingSim checkout 5daddb2
    .venv/bin/python validation/recorded/build.py --training training --llmservingsim LLMServingSim

The LLMServingSim files the corpus needs (MIT licence, see sources/llmservingsim/LICENSE)
are also copied into sources/llmservingsim/, so its runs rebuild without the checkout
(``--llmservingsim validation/recorded/sources/llmservingsim`` reads that layout).
The older RTX 4090 run is at LLMServingSim commit 5bae11f (bench/results/); pass that
checkout's folder with ``--llmservingsim-5bae11f`` or use the copy.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
RUNS = HERE / "runs"
COPIES = HERE / "sources" / "llmservingsim"

#: inference-sim/training@ed5c1d2 default_args/: vLLM 0.15.1 on H100 SXM, measured with
#: inference-perf (e8e0aa9). Engine settings from each run's exp-config.yaml and the
#: collection's README (vLLM 0.15.1; prefix caching and chunked prefill on, vLLM's
#: defaults; gpu_memory_utilization 0.9; 8 GiB of CPU KV offloading).
TRAINING_RUNS = {
    "h100-llama-2-7b-general": ("20260217-231439-llama-2-7b-tp1-general", 1),
    "h100-llama-2-7b-codegen": ("20260217-155451-llama-2-7b-tp1-codegen", 1),
    "h100-llama-2-7b-roleplay": ("20260217-162547-llama-2-7b-tp1-roleplay", 1),
    "h100-llama-2-7b-reasoning": ("20260217-170634-llama-2-7b-tp1-reasoning", 1),
    "h100-codellama-34b-general": ("20260218-150304-codellama-34b-tp2-general", 2),
    "h100-codellama-34b-codegen": ("20260218-150956-codellama-34b-tp2-codegen", 2),
    "h100-codellama-34b-roleplay": ("20260218-155500-codellama-34b-tp2-roleplay", 2),
    "h100-codellama-34b-reasoning": ("20260218-160939-codellama-34b-tp2-reasoning", 2),
    "h100-llama-2-70b-general": ("20260217-202857-llama-2-70b-tp4-general", 4),
    "h100-llama-2-70b-codegen": ("20260217-203421-llama-2-70b-hf-tp4-codegen", 4),
    "h100-llama-2-70b-roleplay": ("20260218-084319-llama-2-70b-tp4-roleplay", 4),
    "h100-llama-2-70b-reasoning": ("20260218-065057-llama-2-70b-hf-tp4-reasoning", 4),
    # Mixture of experts (8 experts, top 2), tensor parallel without expert parallelism
    "h100-mixtral-8x7b-general": ("20260218-130541-mixtral-8x7b-v0-1-tp2-general", 2),
    "h100-mixtral-8x7b-codegen": ("20260218-120914-mixtral-8x7b-v0-1-tp2-codegen", 2),
    "h100-mixtral-8x7b-roleplay": ("20260218-141024-mixtral-8x7b-v0-1-tp2-roleplay", 2),
    "h100-mixtral-8x7b-reasoning": ("20260218-135247-mixtral-8x7b-v0-1-tp2-reasoning", 2),
}
TRAINING_MODELS = {
    "meta-llama/Llama-2-7b-hf": "meta-llama/Llama-2-7b-hf",
    "codellama/CodeLlama-34b-Instruct-hf": "codellama/CodeLlama-34b-Instruct-hf",
    "meta-llama/Llama-2-70b-hf": "meta-llama/Llama-2-70b-hf",
    "mistralai/Mixtral-8x7B-v0.1": "mistralai/Mixtral-8x7B-v0.1",
}

#: casys-kaist/LLMServingSim bench/ runs: vLLM 0.19.0 driven in-process (AsyncLLM), each
#: request's engine timestamps; (folder, workload file, extra engine arguments).
LLMSERVINGSIM_RUNS = {
    "rtxpro6000-llama-3.1-8b": (
        "bench/examples/RTXPRO6000/Llama-3.1-8B/vllm",
        "sharegpt-llama-3.1-8b-300-sps10.jsonl",
        {},
    ),
    "rtxpro6000-qwen3-32b-tp2": (
        "bench/examples/RTXPRO6000/Qwen3-32B/vllm",
        "sharegpt-qwen3-32b-300-sps10.jsonl",
        {},
    ),
    "rtx4090-llama-3.1-8b": (
        "bench/examples/RTX4090/Llama-3.1-8B/vllm",
        "sharegpt-llama-3.1-8b-300-sps10.jsonl",
        {},
    ),
    # The earlier 4090 run (5bae11f) logged no block count: the same card, model,
    # max_model_len and gpu_memory_utilization as the later one, whose vLLM logged 2588.
    "rtx4090-llama-3.1-8b-seqs128": (
        "bench/results/rtx4090-llama8b-tp1",
        "sharegpt-llama-3.1-8b-300-sps10.jsonl",
        {"num_gpu_blocks": 2588},
    ),
}
#: The LLMServingSim runs' GPU when their metadata does not name it (its profiler's
#: meta.yaml: "NVIDIA RTX PRO 6000 Blackwell Server Edition").
LLMSERVINGSIM_GPUS = {"rtxpro6000": "rtx-pro-6000-server", "rtx4090": "rtx-4090"}


def _import(argv: list[str]) -> None:
    from sim.cli import main

    code = main(["import-run", *argv, "--force", "--no-report", "--quiet"])
    if code:
        sys.exit(f"import-run {' '.join(argv)} failed ({code})")


def build_training(training: Path, only: str = "") -> None:
    for run_id, (folder, tp) in TRAINING_RUNS.items():
        if only not in run_id:
            continue
        source = training / "default_args" / folder
        config = yaml.safe_load((source / "exp-config.yaml").read_text())
        engine = {
            "version": "0.15.1",
            "max_num_seqs": config["max_num_seqs"],
            "max_num_batched_tokens": config["max_num_batched_tokens"],
            "max_model_len": config["max_model_len"],
            "tensor_parallel_size": config["tensor_parallelism"],
            "gpu_memory_utilization": 0.9,
            "cpu_offload_gib": 8,
        }
        assert engine["tensor_parallel_size"] == tp, run_id
        with tempfile.TemporaryDirectory() as scratch:
            args = Path(scratch) / "engine.yaml"
            args.write_text(yaml.safe_dump(engine))
            _import(
                [
                    "inference-perf",
                    str(source),
                    "--out",
                    str(RUNS / run_id),
                    "--hardware",
                    "h100-sxm",
                    "--model",
                    TRAINING_MODELS[config["model"]],
                    "--engine-args",
                    str(args),
                    "--source",
                    f"inference-sim/training@ed5c1d2 default_args/{folder}",
                ]
            )
        print(f"built {run_id}")


def _copy_llmservingsim(root: Path, folder: str, workload: str, run_id: str) -> Path:
    """The run's files copied into sources/ (MIT), the copy's folder returned."""
    target = COPIES / run_id
    if root.resolve() == COPIES.resolve():
        return target
    target.mkdir(parents=True, exist_ok=True)
    for name in ("requests.jsonl", "meta.json", "timeseries.csv"):
        shutil.copyfile(root / folder / name, target / name)
    return target


def build_llmservingsim(root: Path, older: Path | None) -> None:
    for run_id, (folder, workload, extra) in LLMSERVINGSIM_RUNS.items():
        base = older if (older is not None and folder.startswith("bench/results")) else root
        copy = _copy_llmservingsim(base, folder, workload, run_id)
        prompts = root / "workloads" / workload
        commit = "5bae11f" if folder.startswith("bench/results") else "5daddb2"
        args = [
            "lifecycle",
            str(copy / "requests.jsonl"),
            "--out",
            str(RUNS / run_id),
            "--hardware",
            LLMSERVINGSIM_GPUS[run_id.split("-")[0]],
            "--source",
            f"casys-kaist/LLMServingSim@{commit} {folder}/requests.jsonl",
        ]
        if prompts.is_file():
            args += ["--prompts", str(prompts)]
        with tempfile.TemporaryDirectory() as scratch:
            if extra:
                engine = Path(scratch) / "engine.yaml"
                engine.write_text(yaml.safe_dump(extra))
                args += ["--engine-args", str(engine)]
            _import(args)
        print(f"built {run_id}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--training", type=Path, help="inference-sim/training checkout")
    parser.add_argument("--llmservingsim", type=Path, help="casys-kaist/LLMServingSim checkout")
    parser.add_argument(
        "--llmservingsim-5bae11f",
        type=Path,
        help="LLMServingSim at 5bae11f (the older RTX 4090 run)",
    )
    parser.add_argument("--only", default="", help="build only the runs whose id holds this")
    args = parser.parse_args()
    RUNS.mkdir(parents=True, exist_ok=True)
    if args.training:
        build_training(args.training, args.only)
    if args.llmservingsim:
        build_llmservingsim(args.llmservingsim, args.llmservingsim_5bae11f)


if __name__ == "__main__":
    main()
