#!/usr/bin/env bash
# Installs what `tune` needs beyond Rust and Python, into the repository itself:
#   .libtorch/  a CPU-only libtorch 2.13.0 (what tch 0.26 expects), from PyPI's torch wheel
#               without its CUDA libraries except the two libtorch_cpu.so links against.
#   .venv/      (with --python-tests) a Python with optuna, for the Optuna-compatibility test.
# Idempotent: a second run checks the stamps and returns at once.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
TORCH_VERSION=2.13.0          # tch 0.26 expects exactly this; torch-sys skips its check when LIBTORCH is set
CUDART_VERSION=13.0.96        # the versions torch 2.13.0 pins through cuda-toolkit 13.0.3
CUPTI_VERSION=13.0.85
PY=${PYTHON:-python3}

if [ ! -f .libtorch/.stamp-$TORCH_VERSION ]; then
  echo "setup: installing CPU libtorch $TORCH_VERSION into .libtorch (about 1.2 GB)" >&2
  rm -rf .libtorch
  # The wheel is cp311; ask for it explicitly so a different local Python still gets it.
  "$PY" -m pip install --quiet --disable-pip-version-check --no-deps --target .libtorch \
    --python-version 3.11 --only-binary=:all: --platform manylinux_2_28_x86_64 --platform manylinux_2_25_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    "torch==$TORCH_VERSION" "nvidia-cuda-runtime==$CUDART_VERSION" "nvidia-cuda-cupti==$CUPTI_VERSION"
  touch .libtorch/.stamp-$TORCH_VERSION
fi

if [ "${1:-}" = "--python-tests" ] && [ ! -f .venv/.stamp-optuna ]; then
  echo "setup: creating .venv with optuna and numpy for the compatibility tests" >&2
  "$PY" -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check "optuna>=4,<6" numpy
  touch .venv/.stamp-optuna
fi
