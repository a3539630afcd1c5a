//! Multi-objective search: Pareto dominance and hypervolume (`pareto`), the NSGA-II sampler
//! (`nsga2`) and random scalarisations that let the single-objective GP and TPE search a Pareto
//! front (`parego`).

pub mod nsga2;
pub mod parego;
pub mod pareto;

pub use nsga2::{Nsga2Options, Nsga2Sampler};
pub use parego::Parego;
