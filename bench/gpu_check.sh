#!/usr/bin/env bash
# The one prepared script for a lent GPU (see ../README.md and shared/DESIGN.md):
#   1. the GPU-marked tests (full size) plus the paged suite, kernels compiled for real;
#   2. bench/gpu_kernels.py: copy bandwidth, paged vs contiguous decode attention over
#      batch x context (llama-3-8b heads, bf16), one llama-3-8b-shaped model step;
#   3. bench/gpu_validate.sh: profile, calibrate and validate a llama-3-8b-shaped model
#      (simpy/pydantic/pyyaml/plotly from shared/wheels: run bench/make_wheelhouse.sh
#      first and carry shared/wheels).
# Needs python3 with torch, triton, numpy, pytest, hypothesis; installs nothing from a
# registry. Step timeouts (100 + 150 + 220 s) cap it at 7.8 minutes on an H200.
# Writes logs and CSVs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$(mktemp -d)}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET # compile the kernels for the GPU, do not interpret them

date -u +"date: %Y-%m-%dT%H:%M:%SZ" | tee "$OUT/gpu_env.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
    | tee -a "$OUT/gpu_env.txt" || true
"$PY" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__,
'cuda', torch.cuda.is_available())" | tee -a "$OUT/gpu_env.txt"

echo "== tests (the real backend, GPU tests included) =="
HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}" timeout 100 "$PY" -m pytest -q -rs \
    -p no:cacheprovider tests/backend/real 2>&1 | tee "$OUT/gpu_tests.log"
tests_rc=${PIPESTATUS[0]}

echo "== timings =="
timeout 150 "$PY" bench/gpu_kernels.py --out "$OUT" "$@" 2>&1 | tee "$OUT/gpu_kernels.log"
bench_rc=${PIPESTATUS[0]}

echo "== validation (simulator vs real backend) =="
VALIDATE_TIMEOUT=220 bash bench/gpu_validate.sh "$OUT" 2>&1 | tee "$OUT/gpu_validate.log"
validate_rc=${PIPESTATUS[0]}

echo "tests exit $tests_rc, bench exit $bench_rc, validate exit $validate_rc; files in $OUT"
exit $((tests_rc != 0 || bench_rc != 0 || validate_rc != 0))
