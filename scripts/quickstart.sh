#!/usr/bin/env bash
# The quickstart on a fresh machine: installs libtorch and the data, builds tune and tune-worker
# (release), and runs the quickstart study on the CPU with the line output. Then try:
#   ./target/release/tune trials studies/quickstart.toml --sort value --limit 5
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --libtorch
export LIBTORCH="$PWD/.libtorch/torch"
cargo build --release --workspace --quiet
exec ./target/release/tune run studies/quickstart.toml "$@"
