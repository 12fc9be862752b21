#!/usr/bin/env bash
# Download, here, the wheels the GPU machine lacks for `pagesim validate` (it has python3
# with torch, triton and numpy but no network): simpy, pydantic (+ pydantic-core,
# annotated-types, typing-extensions, typing-inspection), pyyaml, plotly (+ narwhals,
# packaging). Pinned to the versions this checkout's .venv runs, built for the GPU
# machine's CPython 3.12 on x86-64. Run once before bench/gpu_check.sh:
#
#   bench/make_wheelhouse.sh            # -> shared/wheels/ (travels with the tree)
#   bench/make_wheelhouse.sh DIR        # elsewhere (then carry DIR, WHEELS=DIR there)
#
# shared/wheels/ is added to .git/info/exclude (local only) so the wheels are never
# committed; the device tool sends shared/ with the working tree even so.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST="${1:-shared/wheels}"
PY="${PYTHON:-.venv/bin/python}"
TARGET_PY="${TARGET_PY:-3.12}"
mkdir -p "$DEST"
if [ "$DEST" = shared/wheels ] && [ -d .git ]; then
    grep -qxF '/shared/wheels/' .git/info/exclude 2>/dev/null || echo '/shared/wheels/' >> .git/info/exclude
fi

# name==version as installed here, so the GPU run uses what the tests ran against
pins=$("$PY" - <<'PY'
from importlib.metadata import version
names = ["simpy", "pydantic", "pydantic-core", "annotated-types", "typing-extensions",
         "typing-inspection", "pyyaml", "plotly", "narwhals", "packaging"]
print(" ".join(f"{name}=={version(name)}" for name in names))
PY
)
platforms=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
           manylinux_2_5_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$tag")
done
# --no-deps: the pins above are the whole closure; one version of each, as pip needs there.
# shellcheck disable=SC2086
"$PY" -m pip download -q --no-deps --only-binary=:all: --implementation cp \
    --python-version "$TARGET_PY" "${platforms[@]}" -d "$DEST" $pins
ls -1 "$DEST"
du -sh "$DEST"
