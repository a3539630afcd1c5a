#!/usr/bin/env bash
# Runs every test of tune on a fresh machine (Rust and Python present, nothing else):
# installs libtorch and the test tools, builds, and runs the whole suite.
#   ./scripts/test.sh            # everything
#   ./scripts/test.sh space::    # extra arguments go to `cargo test` (a filter)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --python-tests
export LIBTORCH="$PWD/.libtorch/torch"
cargo build --bins --quiet
cargo test --no-fail-fast "$@" 2>&1
