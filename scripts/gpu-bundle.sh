#!/usr/bin/env bash
# Builds what scripts/gpu-check.sh needs on a GPU machine that has a torch installed but no Rust
# and no network, into one folder small enough to carry there (docs/gpu.md):
#   gpu-bundle/bin/tune, bin/tune-worker   release builds, tune-worker with CUDA
#               (`--features tune-train/cuda`) against the torch version the GPU machine has,
#               through the tch release made for it (tch's README pairs them)
#   gpu-bundle/data/fashion-mnist          the quickstart's data (from setup.sh)
#   gpu-bundle/py/                         Optuna and its pure-Python dependencies (and, with
#               --numpy, a numpy wheel for --python: 16 MiB, for a torch without numpy), for the
#               Optuna side of the throughput comparison
#   gpu-bundle/bin/tmux, lib/              this machine's tmux and its libraries, used only where
#               the GPU machine has no tmux (the capture of the live UI)
#   gpu-bundle/manifest.json               what was built: torch, tch, commit, sizes
# Runs here (Rust, network), from a clean copy of the checkout (tracked and untracked files, not
# ignored ones) under .gpu/, so the tree and its Cargo.lock stay as they are.
#   scripts/gpu-bundle.sh [--torch 2.11.0] [--python 3.12] [--numpy] [--out gpu-bundle] [--libtorch DIR]
# --libtorch DIR: build against this unpacked torch of that version (its torch/ folder, with lib/
# and include/; the CUDA runtime headers in DIR/../nvidia/*/include) instead of downloading one.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
TORCH=2.11.0
PYVER=3.12
OUT=gpu-bundle
LIBTORCH_GIVEN=
NUMPY=no
usage() {
  echo "usage: scripts/gpu-bundle.sh [--torch VERSION] [--python X.Y] [--numpy] [--out DIR] [--libtorch DIR]" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --torch) [ $# -ge 2 ] || usage; TORCH=$2; shift ;;
    --python) [ $# -ge 2 ] || usage; PYVER=$2; shift ;;
    --numpy) NUMPY=yes ;;
    --out) [ $# -ge 2 ] || usage; OUT=$2; shift ;;
    --libtorch) [ $# -ge 2 ] || usage; LIBTORCH_GIVEN=$(cd "$2" && pwd); shift ;;
    *) usage ;;
  esac
  shift
done
# torch → the tch release that expects it (tch's README), and the CUDA runtime whose headers the
# CUDA shims (the CUDA-graph shim) compile against.
case "$TORCH" in
  2.11.*) TCH=0.24 ;;
  2.13.*) TCH=0.26 ;;
  *)
    echo "gpu-bundle: no known tch release for torch $TORCH (known: 2.11 → tch 0.24, 2.13 → tch 0.26)" >&2
    exit 2
    ;;
esac
CUDART=13.0.96   # cuda_runtime_api.h; nvidia-cuda-crt: crt/host_config.h, which cuda_runtime.h includes
CRT=13.0.88
case "$PYVER" in
  3.1[0-4]) ;;
  *) echo "gpu-bundle: --python $PYVER: give the GPU machine's Python as X.Y (3.10 to 3.14)" >&2; exit 2 ;;
esac
for tool in cargo git python3 strip; do
  command -v "$tool" >/dev/null || { echo "gpu-bundle: needs $tool" >&2; exit 2; }
done
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
  { echo "gpu-bundle: no Fashion-MNIST in /usr/share/datasets/fashion-mnist: run scripts/setup.sh first" >&2; exit 2; }

WORK=$ROOT/.gpu
TORCH_DIR=$WORK/torch-$TORCH
LIBTORCH_DIR=$TORCH_DIR/torch
mkdir -p "$WORK"
if [ -n "$LIBTORCH_GIVEN" ]; then
  LIBTORCH_DIR=$LIBTORCH_GIVEN
  [ -f "$LIBTORCH_DIR/lib/libtorch_cuda.so" ] ||
    { echo "gpu-bundle: --libtorch $LIBTORCH_DIR has no lib/libtorch_cuda.so (a CUDA torch's torch/ folder is needed)" >&2; exit 2; }
elif [ ! -f "$TORCH_DIR/.stamp" ]; then
  echo "gpu-bundle: downloading torch $TORCH (its libtorch and headers, about 0.5 GB) and the CUDA runtime headers" >&2
  rm -rf "$TORCH_DIR"
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$TORCH_DIR" \
    --python-version 3.11 --only-binary=:all: --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    "torch==$TORCH" "nvidia-cuda-runtime==$CUDART" "nvidia-cuda-crt==$CRT"
  touch "$TORCH_DIR/.stamp"
fi

# The checkout as it is now, with tch pinned to the release for this torch.
SRC=$WORK/src-$TORCH
rm -rf "$SRC"
mkdir -p "$SRC"
git ls-files -z --cached --others --exclude-standard | xargs -0 -I{} cp --parents -a {} "$SRC/" 2>/dev/null || true
# Files deleted in the tree but not yet in git are listed by --cached; cp skipped them.
sed -i "s/^tch = \"=[0-9.]*\"/tch = \"=$TCH\"/; s/^torch-sys = \"=[0-9.]*\"/torch-sys = \"=$TCH\"/" "$SRC/crates/tune-train/Cargo.toml"
grep -q "^tch = \"=$TCH\"" "$SRC/crates/tune-train/Cargo.toml" ||
  { echo "gpu-bundle: could not pin tch $TCH in crates/tune-train/Cargo.toml" >&2; exit 1; }

echo "gpu-bundle: building tune and tune-worker (CUDA, tch $TCH, torch $TORCH), release" >&2
(cd "$SRC" && LIBTORCH=$LIBTORCH_DIR CARGO_TARGET_DIR=$WORK/target-$TORCH \
  cargo build --release --quiet -p tune -p tune-train --features tune-train/cuda --bin tune --bin tune-worker)

rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib" "$OUT/data" "$OUT/py"
cp "$WORK/target-$TORCH/release/tune" "$WORK/target-$TORCH/release/tune-worker" "$OUT/bin/"
strip "$OUT/bin/tune" "$OUT/bin/tune-worker"
cp -a /usr/share/datasets/fashion-mnist "$OUT/data/"
python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: -d "$OUT/py" \
  "optuna>=4,<6" tqdm colorlog packaging
if [ "$NUMPY" = yes ]; then
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: -d "$OUT/py" \
    --python-version "$PYVER" --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 numpy
fi
if command -v tmux >/dev/null; then
  cp "$(command -v tmux)" "$OUT/bin/"
  ldd "$(command -v tmux)" | awk '/=> \// {print $3}' | grep -Ev '/lib(c|m|resolv|pthread|dl)\.so' |
    while read -r lib; do cp -L "$lib" "$OUT/lib/"; done
fi
commit=$(git rev-parse --short HEAD)
dirty=$(git status --porcelain --untracked-files=no | grep -q . && echo true || echo false)
bytes=$(du -sb "$OUT" | cut -f1)
cat >"$OUT/manifest.json" <<EOF
{"torch": "$TORCH", "tch": "$TCH", "features": ["tune-train/cuda"], "commit": "$commit", "dirty": $dirty, "python": "$PYVER", "built": "$(date -u +%FT%TZ)", "bytes": $bytes}
EOF
tree_bytes=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
total=$((bytes + tree_bytes))
echo "gpu-bundle: $OUT is $((bytes / 1048576)) MiB; with the checkout's files $((total / 1048576)) MiB to carry (limit 64 MiB)" >&2
if [ "$total" -gt $((64 * 1048576)) ]; then
  echo "gpu-bundle: too large to carry in 64 MiB" >&2
  exit 1
fi
