//! `tune`: a hyperparameter-tuning orchestrator.
//!
//! Data flows one way: spec → study → scheduler → (sampler, runner, storage) → events → UI.
//!
//! Benchmarks are not here: they live in the `tune-bench` crate (`crates/tune-bench`), which
//! depends on this one and never the other way round; `tune bench` only hands over to it.

pub mod builtin;
pub mod checkpoint;
pub mod cli;
pub mod commands;
pub mod devices;
pub mod engine;
pub mod events;
pub mod fmt;
pub mod insight;
pub mod limits;
pub mod notice;
pub mod pruner;
pub mod runner;
pub mod sampler;
pub mod scheduler;
pub mod space;
pub mod spec;
pub mod storage;
pub mod study;
pub mod telemetry;
pub mod trial;
pub mod tui;
