//! `tune`: a hyperparameter-tuning orchestrator.
//!
//! Data flows one way: spec → study → scheduler → (sampler, runner, storage) → events → UI.

pub mod bench;
pub mod bench_overhead;
pub mod bench_pruning;
pub mod builtin;
pub mod cli;
pub mod commands;
pub mod devices;
pub mod engine;
pub mod events;
pub mod fmt;
pub mod pruner;
pub mod runner;
pub mod sampler;
pub mod scheduler;
pub mod space;
pub mod spec;
pub mod storage;
pub mod study;
pub mod trial;
pub mod tui;
