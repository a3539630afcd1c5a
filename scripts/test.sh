#!/usr/bin/env bash
# Runs every test of tune on a fresh machine (Rust and Python present, nothing else), in the
# order that proves the orchestrator needs no libtorch:
#   1. the test tools and data (no libtorch; a PostgreSQL server for the tests that need one,
#      which must then run, never skip; Slurm and MUNGE for the tests that start a private
#      single-node cluster, which must run too), then `tune` alone: `cargo build -p tune` and
#      `cargo test -p tune`, with LIBTORCH pointing nowhere;
#   2. libtorch, then the whole workspace: `cargo build --workspace` (which builds `tune-worker`
#      beside `tune`) and the trainer's tests, `cargo test --workspace --exclude tune`; then
#      `cargo build -p tune-train --features tune-train/cuda` (the CUDA-graph shim compiles).
#   3. the gates: `cargo fmt --check` first (it needs no build), and
#      `cargo clippy --workspace --all-targets -- -D warnings` last (it needs libtorch).
#   ./scripts/test.sh            # everything
#   ./scripts/test.sh space::    # extra arguments go to both `cargo test` runs (a filter)
set -euo pipefail
cd "$(dirname "$0")/.."
# --bench: the torch of .libtorch made importable (.venv/bench), for the tests that run real
# torch processes (`torchrun` trials, DDP on gloo); the orchestrator still builds without it.
./scripts/setup.sh --python-tests --postgres --slurm --bench
# Formatting is checked before anything is built: it fails in a second, not after the tests.
cargo fmt --all -- --check
# The PostgreSQL tests must run here, never say "skipped": the set-up above installed the server.
export TUNE_REQUIRE_PG=1
# Likewise the Slurm tests: the set-up above installed Slurm and MUNGE.
export TUNE_REQUIRE_SLURM=1
# And the report's browser test: the set-up above installed Chromium (--python-tests).
export TUNE_REQUIRE_CHROMIUM=1
# And the object-store checkpoint tests: the set-up above installed moto (--python-tests).
export TUNE_REQUIRE_MOTO=1

# .cargo/config.toml points LIBTORCH at .libtorch for the trainer's build, but cargo's [env]
# never overrides a variable that is already set: with this one, anything in `tune` that
# reached for libtorch (torch-sys's build script) would fail here instead of finding it.
LIBTORCH=/nonexistent/libtorch cargo build -p tune --quiet
LIBTORCH=/nonexistent/libtorch cargo test -p tune --no-fail-fast "$@" 2>&1

./scripts/setup.sh --libtorch
export LIBTORCH="$PWD/.libtorch/torch"
# The trainer's CLI test runs target/debug/tune, which `cargo test -p tune-train` does not
# build: this build does, and tune-worker beside it.
cargo build --workspace --quiet
cargo test --workspace --exclude tune --no-fail-fast "$@" 2>&1
# The CUDA-only code (the CUDA-graph shim and what links it) compiled and linked here too,
# though this machine may have no GPU: it builds against the CUDA libtorch's headers and
# libraries, which need no device.
cargo build -p tune-train --features tune-train/cuda --quiet
# Every target of every crate, tests and benchmarks included, without a warning.
cargo clippy --workspace --all-targets --quiet -- -D warnings
