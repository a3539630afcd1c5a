//! The integration tests of `tune`: one binary that boots the real program on real studies in a
//! temp dir per test, against a real SQLite file, and reads back what it printed and stored.

mod ask_tell;
mod attempts;
mod bad_input;
mod bench;
mod bounds;
mod checkpoint_store;
mod cluster;
mod command_trials;
mod common;
mod consistency;
mod database_docs;
mod dead_ends;
mod devices;
mod gpu_check;
mod gpu_telemetry;
mod hardening;
mod importance;
mod moto;
mod multi_host;
mod multi_objective;
mod optuna_compat;
mod postgres;
mod processes_files;
mod queries;
mod recovery;
mod report;
mod report_browser;
mod setup_script;
mod shared_db;
mod slurm;
mod studies;
mod torchrun;
mod ui_text;
mod without_worker;
