//! `cargo bench -p tune-train --bench trainer`: tune's trainer against PyTorch eager on the
//! same model, data and batch (see `tune_train::bench`). Arguments after `--` are the same as
//! for `tune bench trainer`.
fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let opts = match tune_train::bench::BenchOptions::from_args(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("bench trainer: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match tune_train::bench::run(&opts) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench trainer: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
