#!/usr/bin/env bash
# Installs what `tune` needs beyond Rust and Python, into the repository itself. `tune` alone
# (command trials, queries, the UI) needs none of it but the quickstart's data; libtorch is
# only for the builtin trainer (`tune-worker`, crates/tune-train), so it comes on request:
#   .libtorch/  (with --libtorch) a CPU-only libtorch 2.13.0 (what tch 0.26 expects), from
#               PyPI's torch wheel without its CUDA libraries except the two libtorch_cpu.so
#               links against.
#   .venv/      (with --python-tests) a Python with optuna (and scikit-learn, for its fANOVA), for
#               the Optuna-compatibility tests; and moto[server], the S3 server of the tests of
#               checkpoints in an object store.
#   .venv/bench (with --bench, which implies --libtorch) what the .libtorch tree needs to be
#               imported as the `torch` Python package for the trainer benchmark: torch's
#               pure-Python dependencies, numpy, and the CUDA libraries that torch/_C links
#               against (never used on a CPU, but the dynamic loader insists on them). About 3 GB.
#   .libtorch/nvidia  (with --cuda, which implies --libtorch) every CUDA library the torch wheel's
#               libtorch_cuda.so links (the nvidia-* wheels torch 2.13.0 pins, found through
#               torch's own rpath), then a release build of the workspace with CUDA
#               (`--features tune-train/cuda`: only tune-worker links libtorch_cuda). About 4 GB.
#               Needs an NVIDIA driver for CUDA 13 at run time, not to build.
#   --cuda --torch-python PY   instead builds against the torch already installed for Python PY
#               (a venv, conda, a container), when its version is the one tch expects (2.13.x);
#               any other version is refused with status 2 and the ways out.
#   --cuda --check  does every check of the --cuda path (the torch of --torch-python: version,
#               CUDA build; the NVIDIA driver) and says what it would install and build, without
#               installing or building anything: status 0 when the path is open, 2 with the reason.
#   .venv/      (with --python-tests --postgres) psycopg2-binary too, for Optuna on PostgreSQL.
#   .venv-mfbench (with --mfbench) the other optimizers of the side-by-side learning-curve
#               benchmark (crates/tune-bench/python/requirements-mfbench.txt: Optuna, SMAC3, DEHB,
#               Syne Tune 0.13), one package at a time: one that does not install is named and
#               skipped. Optuna's GPSampler uses the torch of --bench when it is there. Never
#               needed by the tests.
#   tmux        (with --python-tests) for the end-to-end test of the live UI.
#   ShellCheck  (with --python-tests) for the test that checks every shell script we ship.
#   chromium    (with --python-tests) Debian's Chromium, for the test that opens `tune report`'s
#               page in a headless browser (tests/cli/report_browser.rs) and for
#               scripts/screenshots-report.sh.
#   postgresql  (with --postgres) Debian's PostgreSQL 15 server binaries and iproute2 (`ip`), for
#               the tests that start their own throwaway server, alone and in network namespaces.
#               No cluster is left running: the package's default one is stopped.
#   slurm-wlm, munge  (with --slurm) Debian's Slurm (slurmctld, slurmd, sbatch, ...) and MUNGE, for
#               the tests that start their own single-node cluster (tests/cli/slurm.rs). No
#               daemon is left running: the packages' own services are stopped.
#   /usr/share/datasets/fashion-mnist  Debian's dataset-fashion-mnist, the quickstart's data.
# Idempotent: a second run checks the stamps and returns at once.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
TORCH_VERSION=2.13.0          # tch 0.26 expects exactly this; torch-sys skips its check when LIBTORCH is set
CUDART_VERSION=13.0.96        # the versions torch 2.13.0 pins through cuda-toolkit 13.0.3
CUPTI_VERSION=13.0.85
CRT_VERSION=13.0.88           # crt/ headers that cuda_runtime.h includes (the CUDA-graph shim's build)
PY=${PYTHON:-python3}

TCH_VERSION=0.26              # crates/tune-train/Cargo.toml pins tch and torch-sys to it

usage() {
  echo "usage: scripts/setup.sh [--libtorch] [--cuda [--torch-python PYTHON] [--check]] [--python-tests] [--postgres] [--slurm] [--bench] [--mfbench]" >&2
  exit 2
}

WANT_LIBTORCH=no WANT_PYTHON_TESTS=no WANT_BENCH=no WANT_CUDA=no WANT_POSTGRES=no WANT_SLURM=no CHECK_ONLY=no WANT_MFBENCH=no
TORCH_PYTHON=
while [ $# -gt 0 ]; do
  case "$1" in
    --libtorch) WANT_LIBTORCH=yes ;;
    --python-tests) WANT_PYTHON_TESTS=yes ;;
    --postgres) WANT_POSTGRES=yes ;;
    --slurm) WANT_SLURM=yes ;;
    --bench) WANT_BENCH=yes WANT_LIBTORCH=yes ;;
    --mfbench) WANT_MFBENCH=yes ;;
    --cuda) WANT_CUDA=yes ;;
    --check) CHECK_ONLY=yes ;;
    --torch-python) [ $# -ge 2 ] || usage; TORCH_PYTHON=$2; shift ;;
    --torch-python=*) TORCH_PYTHON=${1#--torch-python=} ;;
    *) usage ;;
  esac
  shift
done
if [ -n "$TORCH_PYTHON" ] && [ "$WANT_CUDA" = no ]; then
  echo "setup: --torch-python goes with --cuda (it names the torch to build tune-worker against)" >&2
  usage
fi
if [ "$CHECK_ONLY" = yes ] && [ "$WANT_CUDA" = no ]; then
  echo "setup: --check goes with --cuda (it checks the CUDA path without installing or building anything)" >&2
  usage
fi

# An installed torch is checked before anything is installed or built: a wrong version would
# otherwise fail late, in the link, or worse at run time with missing symbols.
LIBTORCH_DIR=$ROOT/.libtorch/torch
if [ -n "$TORCH_PYTHON" ]; then
  # stdout only: warnings that importing torch prints on stderr must not shift the lines.
  err_file=$(mktemp)
  if ! info=$("$TORCH_PYTHON" -c 'import os, torch; print(torch.__version__); print(os.path.dirname(torch.__file__)); print(torch.version.cuda or "")' 2>"$err_file"); then
    echo "setup: $TORCH_PYTHON cannot import torch:" >&2
    tail -3 "$err_file" >&2
    rm -f "$err_file"
    exit 2
  fi
  rm -f "$err_file"
  found=$(echo "$info" | sed -n 1p)
  dir=$(echo "$info" | sed -n 2p)
  cuda=$(echo "$info" | sed -n 3p)
  case "${found%%+*}" in
    "${TORCH_VERSION%.*}".*) ;;
    *)
      cat >&2 <<EOF
setup: tune-worker is built with tch $TCH_VERSION, which expects torch ${TORCH_VERSION%.*}.x, but $TORCH_PYTHON has torch $found ($dir).
Either install the matching torch into this repository (your Python stays as it is):
  ./scripts/setup.sh --cuda
or build against yours with the tch release made for torch ${found%%+*}: set \`tch\` and \`torch-sys\` in
crates/tune-train/Cargo.toml to that release (tch's README says which torch each release expects;
0.24 is the one for torch 2.11), then
  LIBTORCH=$dir cargo build --release --workspace --features tune-train/cuda
EOF
      exit 2
      ;;
  esac
  if [ -z "$cuda" ] || [ ! -f "$dir/lib/libtorch_cuda.so" ]; then
    echo "setup: the torch of $TORCH_PYTHON ($found, $dir) is built without CUDA (torch.version.cuda is None or lib/libtorch_cuda.so is missing); run ./scripts/setup.sh --cuda to install a CUDA one into .libtorch" >&2
    exit 2
  fi
  LIBTORCH_DIR=$dir
elif [ "$WANT_CUDA" = yes ]; then
  WANT_LIBTORCH=yes
fi

# --check: the driver and what would happen, then stop before anything is installed or built.
if [ "$CHECK_ONLY" = yes ]; then
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "setup: --check: no nvidia-smi, so no NVIDIA driver here: a build would work, but tune-worker would see no GPU" >&2
    exit 2
  fi
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 || true)
  driver_cuda=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\)\..*/\1/p' | head -1 || true)
  if [ -z "$driver" ] || [ -z "$driver_cuda" ]; then
    echo "setup: --check: nvidia-smi cannot talk to the NVIDIA driver: $(nvidia-smi 2>&1 | head -1)" >&2
    exit 2
  fi
  if [ "$driver_cuda" -lt 13 ]; then
    echo "setup: --check: driver $driver supports CUDA $driver_cuda at most; torch ${TORCH_VERSION%.*}'s CUDA 13 build needs driver 580 or newer" >&2
    exit 2
  fi
  if [ -n "$TORCH_PYTHON" ]; then
    echo "setup: --check: driver $driver (CUDA $driver_cuda); would build tune-worker with CUDA against the torch of $TORCH_PYTHON: LIBTORCH=$LIBTORCH_DIR cargo build --release --workspace --features tune-train/cuda"
  else
    echo "setup: --check: driver $driver (CUDA $driver_cuda); would install torch $TORCH_VERSION and its CUDA libraries into .libtorch (about 4 GB), then build tune-worker with CUDA against it"
  fi
  exit 0
fi

# Every CUDA library torch 2.13.0's libtorch_cuda.so links, at the versions it pins (nccl: its
# 2.29.7 is not on the index for this platform; any libnccl.so.2 satisfies the loader, and a
# single-GPU trial never calls it).
NVIDIA_WHEELS=("nvidia-cudnn-cu13==9.20.0.48" "nvidia-cusparselt-cu13==0.8.1" "nvidia-nccl-cu13==2.32.3" "nvidia-nvshmem-cu13==3.4.5"
  "nvidia-cublas==13.1.1.3" "nvidia-cufft==12.0.0.61" "nvidia-cufile==1.15.1.6" "nvidia-curand==10.4.0.35"
  "nvidia-cusparse==12.6.3.3" "nvidia-nvjitlink==13.0.88" "nvidia-cuda-nvrtc==13.0.88")

if [ "$WANT_LIBTORCH" = yes ] && [ ! -f .libtorch/.stamp-$TORCH_VERSION ]; then
  echo "setup: installing CPU libtorch $TORCH_VERSION into .libtorch (about 1.2 GB)" >&2
  rm -rf .libtorch
  # The wheel is cp311; ask for it explicitly so a different local Python still gets it.
  "$PY" -m pip install --quiet --disable-pip-version-check --no-deps --target .libtorch \
    --python-version 3.11 --only-binary=:all: --platform manylinux_2_28_x86_64 --platform manylinux_2_25_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    "torch==$TORCH_VERSION" "nvidia-cuda-runtime==$CUDART_VERSION" "nvidia-cuda-cupti==$CUPTI_VERSION"
  touch .libtorch/.stamp-$TORCH_VERSION
fi

# The CUDA-graph shim (built with --features tune-train/cuda, also by scripts/test.sh) includes
# libtorch's CUDA headers, which include cuda_runtime.h, which includes crt/host_config.h: a
# header the CUDA 13 runtime wheel leaves to nvidia-cuda-crt (134 KB of headers). Its own stamp,
# so that a tree installed before it gets it too.
if [ "$WANT_LIBTORCH" = yes ] && [ ! -f .libtorch/.stamp-crt-$CRT_VERSION ]; then
  rm -rf .libtorch/.crt-tmp
  "$PY" -m pip install --quiet --disable-pip-version-check --no-deps --target .libtorch/.crt-tmp \
    --python-version 3.11 --only-binary=:all: --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    "nvidia-cuda-crt==$CRT_VERSION"
  # pip --target skips a top-level folder that already exists (nvidia/): merge it in.
  cp -a .libtorch/.crt-tmp/. .libtorch/
  rm -rf .libtorch/.crt-tmp
  touch .libtorch/.stamp-crt-$CRT_VERSION
fi

if [ "$WANT_CUDA" = yes ] && [ -z "$TORCH_PYTHON" ] && [ ! -f .libtorch/.stamp-cuda-$TORCH_VERSION ]; then
  echo "setup: installing the CUDA libraries of torch $TORCH_VERSION into .libtorch (about 3 GB)" >&2
  # pip --target skips a top-level folder that already exists (nvidia/, from the CPU tree):
  # install beside it, then merge.
  rm -rf .libtorch/.cuda-tmp
  "$PY" -m pip install --quiet --disable-pip-version-check --no-deps --target .libtorch/.cuda-tmp \
    --python-version 3.11 --only-binary=:all: --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    "${NVIDIA_WHEELS[@]}"
  cp -a .libtorch/.cuda-tmp/. .libtorch/
  rm -rf .libtorch/.cuda-tmp
  touch .libtorch/.stamp-cuda-$TORCH_VERSION
fi

if [ "$WANT_CUDA" = yes ]; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    driver_cuda=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\)\..*/\1/p' | head -1 || true)
    if [ -n "$driver_cuda" ] && [ "$driver_cuda" -lt 13 ]; then
      echo "setup: WARNING: this NVIDIA driver supports CUDA $driver_cuda at most; torch $TORCH_VERSION's wheels need CUDA 13 (driver 580 or newer): tune-worker will see no GPU until the driver is updated" >&2
    fi
  else
    echo "setup: WARNING: no nvidia-smi, so no NVIDIA driver here: the build works, but tune-worker sees no GPU until a driver is installed" >&2
  fi
  echo "setup: building tune, tune-worker (with CUDA, against $LIBTORCH_DIR) and tune-bench, release" >&2
  # build.rs bakes $LIBTORCH_DIR/lib into tune-worker's rpath; torch's own rpath finds the
  # nvidia libraries beside it.
  LIBTORCH=$LIBTORCH_DIR cargo build --release --workspace --features tune-train/cuda --quiet
  echo "setup: tune-worker says: $(./target/release/tune-worker --capabilities)" >&2
fi

if [ "$WANT_PYTHON_TESTS" = yes ] && [ ! -f .venv/.stamp-optuna ]; then
  echo "setup: creating .venv with optuna and numpy for the compatibility tests" >&2
  "$PY" -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check "optuna>=4,<6" numpy
  touch .venv/.stamp-optuna
fi

# moto's server mode: the S3-compatible server the tests of checkpoints in an object store start
# (tests/cli/moto.rs; MinIO is not packaged). Pinned: its S3 answers are what the tests read.
if [ "$WANT_PYTHON_TESTS" = yes ] && [ ! -f .venv/.stamp-moto ]; then
  echo "setup: installing moto (an S3 server for the object-store checkpoint tests) into .venv" >&2
  .venv/bin/pip install --quiet --disable-pip-version-check "moto[server]==5.1.22"
  touch .venv/.stamp-moto
fi

if [ "$WANT_MFBENCH" = yes ]; then
  echo "setup: installing the side-by-side benchmark's optimizers into .venv-mfbench" >&2
  [ -x .venv-mfbench/bin/python ] || "$PY" -m venv .venv-mfbench
  mf_failed=
  while read -r req; do
    case "$req" in '' | '#'*) continue ;; esac
    if ! .venv-mfbench/bin/python -m pip install --quiet --disable-pip-version-check "$req"; then
      echo "setup: $req did not install into .venv-mfbench; the benchmark leaves it out" >&2
      mf_failed="$mf_failed $req"
    fi
  done < crates/tune-bench/python/requirements-mfbench.txt
  # Optuna's GPSampler (the GP + MedianPruner row) needs torch, which PyPI has only as the CUDA
  # build (several GB): the harness uses this checkout's .libtorch and .venv/bench instead.
  if .venv-mfbench/bin/python -c 'import torch' >/dev/null 2>&1; then :
  elif [ -d .libtorch/torch ] && [ -d .venv/bench/nvidia ]; then
    echo "setup: Optuna's GPSampler will import the torch of .libtorch and .venv/bench" >&2
  else
    echo "setup: no torch for Optuna's GPSampler (optuna-gp-median is left out): run scripts/setup.sh --bench (about 3 GB) for it" >&2
  fi
  [ -z "$mf_failed" ] || echo "setup: not installed into .venv-mfbench:$mf_failed" >&2
fi

# scikit-learn, which Optuna's fANOVA evaluator fits its forest with (the fANOVA agreement test),
# with a stamp of its own so that a .venv made before it gets it.
if [ "$WANT_PYTHON_TESTS" = yes ] && [ ! -f .venv/.stamp-sklearn ]; then
  echo "setup: installing scikit-learn into .venv for Optuna's fANOVA" >&2
  .venv/bin/python -m pip install --quiet --disable-pip-version-check scikit-learn
  touch .venv/.stamp-sklearn
fi

# Optuna's PostgreSQL driver, with a stamp of its own so that a .venv made before it gets it.
if [ "$WANT_PYTHON_TESTS" = yes ] && [ "$WANT_POSTGRES" = yes ] && [ ! -f .venv/.stamp-psycopg2 ]; then
  echo "setup: installing psycopg2-binary into .venv for Optuna on PostgreSQL" >&2
  .venv/bin/python -m pip install --quiet --disable-pip-version-check psycopg2-binary
  touch .venv/.stamp-psycopg2
fi

# apt-get install, with `apt-get update` first only when the package lists are too old to have it.
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "$@" >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends "$@" >/dev/null 2>&1; }
}

PG_BIN=/usr/lib/postgresql/15/bin
if [ "$WANT_POSTGRES" = yes ] && [ ! -x $PG_BIN/pg_ctl ]; then
  echo "setup: installing postgresql (Debian package) for the PostgreSQL tests" >&2
  if ! apt_install postgresql; then
    echo "setup: could not install postgresql with apt-get; the PostgreSQL tests need $PG_BIN" >&2
    exit 1
  fi
  # The package may start its default cluster: the tests start their own, and nothing of ours
  # may be left listening on 5432.
  pg_ctlcluster 15 main stop >/dev/null 2>&1 || true
  if [ ! -x $PG_BIN/pg_ctl ]; then
    echo "setup: the postgresql package installed no $PG_BIN/pg_ctl (not PostgreSQL 15?)" >&2
    exit 1
  fi
fi
if [ "$WANT_POSTGRES" = yes ] && ! command -v ip >/dev/null 2>&1; then
  echo "setup: installing iproute2 (Debian package) for the multi-host test" >&2
  apt_install iproute2 || { echo "setup: could not install iproute2 with apt-get" >&2; exit 1; }
fi

# Slurm for the tests that submit the sbatch script to a real (private, single-node) cluster.
if [ "$WANT_SLURM" = yes ] && { [ ! -x /usr/sbin/slurmctld ] || [ ! -x /usr/sbin/slurmd ] || [ ! -x /usr/sbin/munged ] || ! command -v sbatch >/dev/null 2>&1; }; then
  echo "setup: installing slurm-wlm and munge (Debian packages) for the Slurm tests" >&2
  if ! apt_install slurm-wlm munge; then
    echo "setup: could not install slurm-wlm and munge with apt-get; the Slurm tests need slurmctld, slurmd, sbatch and munged" >&2
    exit 1
  fi
  # Where the packages start their services, stop them: the tests run their own daemons, on
  # their own ports and sockets.
  for s in slurmctld slurmd munge; do
    service "$s" stop >/dev/null 2>&1 || true
  done
fi

# Tools a test uses when present and says it skipped without: a failed install only warns.
# optional_tool COMMAND WHAT-FOR WHAT-THE-TEST-DOES-WITHOUT
optional_tool() {
  command -v "$1" >/dev/null 2>&1 && return 0
  echo "setup: installing $1 (Debian package) for $2" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "$1" >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "$1" >/dev/null 2>&1; } ||
    echo "setup: WARNING: could not install $1; $3" >&2
}
if [ "$WANT_PYTHON_TESTS" = yes ]; then
  optional_tool tmux "the live UI's end-to-end test" \
    "the UI's end-to-end test will say it was skipped"
  optional_tool shellcheck "the test of the shipped shell scripts" \
    "the scripts' test will check them with bash -n only"
  # scripts/test.sh sets TUNE_REQUIRE_CHROMIUM=1, so there a missing browser fails the report's
  # browser test instead of letting it skip.
  optional_tool chromium "the test that opens tune report's page in a headless browser" \
    "the report's browser test will say it was skipped (or fail where TUNE_REQUIRE_CHROMIUM=1)"
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
