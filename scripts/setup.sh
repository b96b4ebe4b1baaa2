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
# torch first and pinned: left to the resolver, plain `torch` pulls the CUDA build (several GB).
.venv/bin/python -m pip install --quiet --disable-pip-version-check torch==2.13.0
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev,fast-cpu]"
# Porter's native CPU kernels, compiled against this MLX (~30 s; `porter doctor` shows whether they are in use)
.venv/bin/porter build-kernels
echo "setup done: activate with 'source .venv/bin/activate' or call .venv/bin/porter directly"
