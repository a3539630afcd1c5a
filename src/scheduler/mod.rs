//! The study loop: ask the sampler, persist, dispatch to worker slots, collect reports, prune,
//! tell. The scheduler is the only writer of study state.

pub mod events;

pub use events::{Control, Event, StudyInfo, TrialSummary};
