#!/usr/bin/env bash
# Every GPU check of tune in one call, for a GPU machine lent for minutes (docs/gpu.md):
#   scripts/gpu-check.sh OUTDIR [--budget SECONDS] [--only STEP,STEP]
# writes OUTDIR/report.md and OUTDIR/report.json (and each step's raw output under OUTDIR/raw/).
# It needs an NVIDIA GPU and a Python with a CUDA torch (TORCH_PYTHON, else python3, else
# /opt/torch/.venv/bin/python); tune and tune-worker come from a carried gpu-bundle/ built for
# that torch by scripts/gpu-bundle.sh, or from target/release when they were built here with
# `--features tune-train/cuda`. Without a GPU it exits 2 at once and says why.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: scripts/gpu-check.sh OUTDIR [--budget SECONDS] [--only STEP,STEP]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
case "$1" in -*) usage ;; esac

# No GPU, no check: say so before anything else runs or is written.
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU here: nvidia-smi is not installed (no NVIDIA driver); run this on the GPU machine (docs/gpu.md)" >&2
  exit 2
fi
if ! gpus=$(nvidia-smi --query-gpu=index,name --format=csv,noheader 2>&1) || [ -z "$gpus" ]; then
  echo "gpu-check: no NVIDIA GPU here: nvidia-smi cannot reach one: $(echo "$gpus" | head -1)" >&2
  exit 2
fi

# The Python whose torch the check measures against, and which writes the report.
py=
for cand in "${TORCH_PYTHON:-}" python3 /opt/torch/.venv/bin/python; do
  [ -n "$cand" ] || continue
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import torch' >/dev/null 2>&1; then
    py=$cand
    break
  fi
done
if [ -z "$py" ]; then
  echo "gpu-check: no Python with torch found (tried \$TORCH_PYTHON, python3, /opt/torch/.venv/bin/python); set TORCH_PYTHON" >&2
  exit 2
fi
exec "$py" scripts/gpu/check.py "$@"
