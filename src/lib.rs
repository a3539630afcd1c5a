//! `tune`: a hyperparameter-tuning orchestrator.
//!
//! Data flows one way: spec → study → scheduler → (sampler, runner, storage) → events → UI.

pub mod pruner;
pub mod runner;
pub mod sampler;
pub mod scheduler;
pub mod space;
pub mod trial;
pub mod tui;
