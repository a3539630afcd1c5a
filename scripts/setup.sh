#!/usr/bin/env bash
# Installs what `tune` needs beyond Rust and Python, into the repository itself. `tune` alone
# (command trials, queries, the UI) needs none of it but the quickstart's data; libtorch is
# only for the builtin trainer (`tune-worker`, crates/tune-train), so it comes on request:
#   .libtorch/  (with --libtorch) a CPU-only libtorch 2.13.0 (what tch 0.26 expects), from
#               PyPI's torch wheel without its CUDA libraries except the two libtorch_cpu.so
#               links against.
#   .venv/      (with --python-tests) a Python with optuna, for the Optuna-compatibility test.
#   .venv/bench (with --bench, which implies --libtorch) what the .libtorch tree needs to be
#               imported as the `torch` Python package for the trainer benchmark: torch's
#               pure-Python dependencies, numpy, and the CUDA libraries that torch/_C links
#               against (never used on a CPU, but the dynamic loader insists on them). About 3 GB.
#   tmux        (with --python-tests) for the end-to-end test of the live UI.
#   /usr/share/datasets/fashion-mnist  Debian's dataset-fashion-mnist, the quickstart's data.
# Idempotent: a second run checks the stamps and returns at once.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
TORCH_VERSION=2.13.0          # tch 0.26 expects exactly this; torch-sys skips its check when LIBTORCH is set
CUDART_VERSION=13.0.96        # the versions torch 2.13.0 pins through cuda-toolkit 13.0.3
CUPTI_VERSION=13.0.85
PY=${PYTHON:-python3}

WANT_LIBTORCH=no WANT_PYTHON_TESTS=no WANT_BENCH=no
for arg in "$@"; do
  case "$arg" in
    --libtorch) WANT_LIBTORCH=yes ;;
    --python-tests) WANT_PYTHON_TESTS=yes ;;
    --bench) WANT_BENCH=yes WANT_LIBTORCH=yes ;;
    *) echo "usage: scripts/setup.sh [--libtorch] [--python-tests] [--bench]" >&2; exit 2 ;;
  esac
done

if [ "$WANT_LIBTORCH" = yes ] && [ ! -f .libtorch/.stamp-$TORCH_VERSION ]; then
  echo "setup: installing CPU libtorch $TORCH_VERSION into .libtorch (about 1.2 GB)" >&2
  rm -rf .libtorch
  # The wheel is cp311; ask for it explicitly so a different local Python still gets it.
  "$PY" -m pip install --quiet --disable-pip-version-check --no-deps --target .libtorch \
    --python-version 3.11 --only-binary=:all: --platform manylinux_2_28_x86_64 --platform manylinux_2_25_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    "torch==$TORCH_VERSION" "nvidia-cuda-runtime==$CUDART_VERSION" "nvidia-cuda-cupti==$CUPTI_VERSION"
  touch .libtorch/.stamp-$TORCH_VERSION
fi

if [ "$WANT_PYTHON_TESTS" = yes ] && [ ! -f .venv/.stamp-optuna ]; then
  echo "setup: creating .venv with optuna and numpy for the compatibility tests" >&2
  "$PY" -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check "optuna>=4,<6" numpy
  touch .venv/.stamp-optuna
fi

if [ "$WANT_PYTHON_TESTS" = yes ] && ! command -v tmux >/dev/null 2>&1; then
  echo "setup: installing tmux (Debian package) for the live UI's end-to-end test" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q tmux >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q tmux >/dev/null 2>&1; } ||
    echo "setup: WARNING: could not install tmux; the UI's end-to-end test will say it was skipped" >&2
fi

# The quickstart's data: the full Fashion-MNIST from Debian (MIT licence, 31 MB). Not fatal
# when it fails (no root, no apt): only the quickstart and its test need it, and that test
# says it was skipped.
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  echo "setup: installing dataset-fashion-mnist (Debian package) for the quickstart" >&2
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1; then
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1; } ||
      echo "setup: WARNING: could not install dataset-fashion-mnist; studies/quickstart.toml needs it" >&2
  fi
fi

if [ "$WANT_BENCH" = yes ] && [ ! -f .venv/bench/.stamp-$TORCH_VERSION ]; then
  echo "setup: installing the benchmark's Python side into .venv/bench (about 3 GB)" >&2
  mkdir -p .venv/bench
  # The versions torch 2.13.0 pins (nccl: its 2.29.7 is not on the index for this platform;
  # any libnccl.so.2 satisfies the loader, and nothing calls it on a CPU). --no-deps keeps
  # torch itself (already in .libtorch) and triton out.
  "$PY" -m pip install --quiet --disable-pip-version-check --no-deps --target .venv/bench \
    --python-version 3.11 --only-binary=:all: --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
    "nvidia-cudnn-cu13==9.20.0.48" "nvidia-cusparselt-cu13==0.8.1" "nvidia-nccl-cu13==2.32.3" "nvidia-nvshmem-cu13==3.4.5" \
    "nvidia-cublas==13.1.1.3" "nvidia-cufft==12.0.0.61" "nvidia-cufile==1.15.1.6" "nvidia-curand==10.4.0.35" \
    "nvidia-cusparse==12.6.3.3" "nvidia-nvjitlink==13.0.88" "nvidia-cuda-nvrtc==13.0.88" \
    "numpy<3" "filelock" "typing-extensions>=4.10" "sympy>=1.13.3" "networkx>=2.5.1" "jinja2" "markupsafe" "mpmath" "fsspec>=0.8.5" "setuptools>=77.0.3"
  touch .venv/bench/.stamp-$TORCH_VERSION
fi
