//! Trials that run the user's own command (`shared/spec/command-trials.md`).
