#!/usr/bin/env bash
# One-command setup of a fresh machine: a virtual environment in .venv with torch 2.13.0 (CPU build),
# MLX (mlx[cpu] on Linux), Porter itself (editable), the test dependencies and, on Linux, an optimized BLAS that
# Porter hands to MLX at import (the fast-cpu extra), and Porter's native CPU kernels built for this machine
# (`.venv/bin/porter doctor` shows which BLAS and whether the kernels are in use).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
# Run again, the installs are skipped while pyproject.toml and this script are unchanged (the stamp in .venv records
# them; PORTER_SETUP_FORCE=1 reinstalls). Downloads go through pip's cache (~/.cache/pip): a CI that keeps it
# between runs downloads torch once.
stamp=.venv/.porter-setup-stamp
wanted=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ "${PORTER_SETUP_FORCE:-0}" != 0 ] || [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
    rm -f "$stamp"
    # torch first and pinned: left to the resolver, plain `torch` pulls the CUDA build (several GB).
    .venv/bin/python -m pip install --quiet --disable-pip-version-check torch==2.13.0
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev,fast-cpu]"
    echo "$wanted" > "$stamp"
else
    echo "setup: packages already installed for this pyproject.toml (PORTER_SETUP_FORCE=1 reinstalls)"
fi
# Porter's native CPU kernels, compiled against this MLX (~30 s; `porter doctor` shows whether they are in use); a build
# for this MLX, CPU and source tree is kept in ~/.cache/porter/kernels and reused, not rebuilt
.venv/bin/porter build-kernels
echo "setup done: activate with 'source .venv/bin/activate' or call .venv/bin/porter directly"
