#!/usr/bin/env bash
# The GPU step of issue 6: profile, calibrate and validate a llama-3-8b-shaped model with
# random weights (bf16, Triton kernels) on one CUDA GPU, then print the error table.
#
#   bench/gpu_validate.sh [OUT]     # called by bench/gpu_check.sh with OUT=$OUT
#
# The GPU machine has python3 with torch, triton and numpy but no network: simpy, pydantic,
# pyyaml and plotly come from wheels made here beforehand by bench/make_wheelhouse.sh
# (shared/wheels/, or WHEELS=DIR), installed into /tmp/pagesim-site beside the system's torch.
# Writes into OUT one file, gpu_validation.tar.gz (profile.csv, calibration.json,
# validation.json, steps.csv, validation.html): the device tool returns at most 8 files.
# About 70 s on an H100 (2026-12-05, docs/cost-models.md); VALIDATE_TIMEOUT (default 270 s)
# bounds it.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-${OUT:-$(mktemp -d)}}"
PY="${PYTHON:-python3}"
WHEELS="${WHEELS:-shared/wheels}"
WORK="${WORK:-/tmp/pagesim-gpu-validation}"
mkdir -p "$OUT" "$WORK"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 PIP_ROOT_USER_ACTION=ignore
unset TRITON_INTERPRET # compile the kernels for the GPU

# -- dependencies ------------------------------------------------------------------------
if ! "$PY" -c "import simpy, pydantic, yaml, plotly" 2>/dev/null; then
    if [ ! -d "$WHEELS" ]; then
        echo "gpu_validate: no $WHEELS; run bench/make_wheelhouse.sh where pip works" >&2
        exit 3
    fi
    # --target, not a venv: the GPU machine's python3 is itself a venv (/opt/torch/.venv),
    # and a venv made from it with --system-site-packages would not see its torch.
    "$PY" -m pip install -q --no-index --no-cache-dir --no-compile --upgrade \
        --find-links "$WHEELS" --target /tmp/pagesim-site simpy pydantic pyyaml plotly || exit 3
    export PYTHONPATH="$PYTHONPATH:/tmp/pagesim-site"
    "$PY" -c "import simpy, pydantic, yaml, plotly, torch" || exit 3
fi

# -- profile + calibrate + validate (one command) ------------------------------------------
# llama-3-8b shape, bf16, a 16 GiB pool (8192 blocks x 16 tokens x 128 KiB); traffic that
# batches decodes and chunks prefills; 100 requests keep the measured run near a minute.
# The analytic model's preset is the card found (an H200 where the name says neither).
case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" in
    *H100*) hardware=h100-sxm ;;
    *) hardware=h200 ;;
esac
echo "gpu_validate: hardware preset $hardware"
overrides=(
    model=llama-3-8b hardware=$hardware backend.device=cuda backend.dtype=bfloat16
    cache.num_blocks=8192 scheduler.max_num_seqs=64 scheduler.max_num_batched_tokens=1024
    workload.input.min=128 workload.input.max=1024 workload.output.min=16
    workload.output.max=128 workload.arrival.rate_rps=10 simulation.num_requests=100
)
set_args=()
for assignment in "${overrides[@]}"; do set_args+=(--set "$assignment"); done
timeout "${VALIDATE_TIMEOUT:-270}" "$PY" -m sim.cli validate \
    scenarios/validation.yaml "${set_args[@]}" --out "$WORK" --quick --warmup 2 --repeats 3 \
    --max-context 2048 --step-repeats 2 --quiet
rc=$?
if [ -f "$WORK/validation.json" ]; then
    tar -czf "$OUT/gpu_validation.tar.gz" -C "$WORK" \
        $(cd "$WORK" && ls profile.csv calibration.json validation.json steps.csv validation.html 2>/dev/null)
fi
echo "gpu_validate exit $rc"
exit $rc
