//! The integration tests of `tune`: one binary that boots the real program on real studies in a
//! temp dir per test, against a real SQLite file, and reads back what it printed and stored.

mod ask_tell;
mod bad_input;
mod bench;
mod bounds;
mod command_trials;
mod common;
mod consistency;
mod database_docs;
mod devices;
mod multi_host;
mod multi_objective;
mod optuna_compat;
mod postgres;
mod queries;
mod recovery;
mod setup_script;
mod shared_db;
mod studies;
mod without_worker;
