//! Benchmarks of `tune`'s own components, run by `tune bench ...`: problem definitions and
//! harnesses that drive the library directly (no processes), so that the figures measure the
//! component alone.

pub mod optimizers;
pub mod problems;
pub mod watch_poll;

pub use optimizers::{OptimizerBenchOptions, run as run_optimizers};
