//! `cargo bench -p tune-bench --bench tui_render [-- FRAMES]`: `tune-bench tui` in the release
//! profile without installing anything, as the figures in BENCHMARKS.md were taken.

use std::process::ExitCode;

fn main() -> ExitCode {
    let frames = std::env::args()
        .skip(1)
        .find_map(|a| a.parse::<u32>().ok())
        .unwrap_or(200);
    let args = tune_bench::cli::TuiArgs {
        frames,
        trials: 10_000,
    };
    match tune_bench::tui::run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tui bench failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}
