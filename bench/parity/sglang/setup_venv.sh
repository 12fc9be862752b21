#!/usr/bin/env bash
# Rebuild the CPU-only sglang scheduler-sim venv. Everything --no-deps so pip never
# swaps in a CUDA torch (sglang 0.5.23 pins torch==2.14.1; torchvision pulls it too).
set -euo pipefail
V=${1:-/tmp/pagesim-sglang-0.5.23}
python3 -m venv "$V"
WHEEL=$(ls /opt/wheels/torch-2.13.0+cpu-*.whl 2>/dev/null | head -1)
"$V/bin/pip" install -q --no-deps "${WHEEL:-torch==2.13.0}"
"$V/bin/pip" install -q --no-deps -r "$(dirname "$0")/requirements-nodeps.txt"
"$V/bin/python" -c "import torch; assert torch.__version__ == '2.13.0+cpu', torch.__version__"
