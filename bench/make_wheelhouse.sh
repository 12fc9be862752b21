#!/usr/bin/env bash
# For a GPU machine without network access (its own python3 with torch, triton and numpy):
# download here the wheels `pagesim validate` needs besides those, so they can be copied
# to it: simpy, pydantic (+ pydantic-core, annotated-types, typing-extensions,
# typing-inspection), pyyaml, plotly (+ narwhals, packaging), pinned to the versions this
# checkout's .venv runs, built for TARGET_PY (default 3.12) on x86-64. Then, on the GPU
# machine, bench/gpu_check.sh installs them from WHEELS:
#
#   bench/make_wheelhouse.sh            # -> shared/wheels/
#   bench/make_wheelhouse.sh DIR        # -> DIR (then WHEELS=DIR bench/gpu_check.sh there)
#
# shared/wheels/ is listed in .git/info/exclude (this clone only), so the wheels are never
# committed. A GPU machine with network access needs none of this: pip install -e .
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
