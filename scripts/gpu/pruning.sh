#!/usr/bin/env bash
# `tune-bench pruning` on a GPU machine lent for minutes (docs/gpu.md): the quickstart-shaped
# study (Fashion-MNIST MLP, 9 epochs) with a pruner against no pruning, at equal compute, over
# many seeds, the seeds' runs side by side on one GPU.
#   scripts/gpu/pruning.sh OUTDIR SEEDS [SEEDS...] [-- tune-bench pruning flags]
# Each SEEDS (a comma list, e.g. 1,2) is one `tune-bench pruning --device cuda:0 --seeds SEEDS`
# process; its output goes to OUTDIR/pruning-SEEDS.txt (commas made underscores). The flags after `--` go to every one
# (default: `--pruner default --sampler gp`). tune, tune-worker and tune-bench come from
# gpu-bundle/bin (scripts/gpu-bundle.sh; copy target/release/tune-bench there), the data from
# gpu-bundle/data/fashion-mnist (only the first --limit training images are read).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { echo "usage: scripts/gpu/pruning.sh OUTDIR SEEDS [SEEDS...] [-- FLAGS]" >&2; exit 2; }
out=$1
shift
groups=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do groups+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(--pruner default --sampler gp)
mkdir -p "$out"

py=
for cand in "${TORCH_PYTHON:-}" python3 /opt/torch/.venv/bin/python; do
  [ -n "$cand" ] || continue
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import torch' >/dev/null 2>&1; then py=$cand; break; fi
done
[ -n "$py" ] || { echo "pruning.sh: no Python with torch (set TORCH_PYTHON)" >&2; exit 2; }
lib=$("$py" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for b in tune tune-worker tune-bench; do
  [ -x "gpu-bundle/bin/$b" ] || { echo "pruning.sh: gpu-bundle/bin/$b is missing" >&2; exit 2; }
done
std=/usr/share/datasets/fashion-mnist
if [ ! -f "$std/train-images-idx3-ubyte.gz" ]; then
  mkdir -p "$(dirname "$std")"
  ln -sfn "$PWD/gpu-bundle/data/fashion-mnist" "$std"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" || true
gpu-bundle/bin/tune-worker --capabilities > "$out/capabilities.json" 2>&1 || true
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -lms 1000 > "$out/nvidia-smi.csv" 2>/dev/null &
smi=$!
pids=()
for g in "${groups[@]}"; do
  gpu-bundle/bin/tune-bench pruning --device cuda:0 --seeds "$g" "${flags[@]}" > "$out/pruning-${g//,/_}.txt" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
kill "$smi" 2>/dev/null || true
exit $status
