use std::process::ExitCode;

// TEMPORARY (branch `trainer`): a minimal dispatch of the hidden `tune worker --device D`
// subcommand and `tune bench trainer`, until the lead wires them into src/cli.rs.
fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("worker") => {
            let device = match (args.get(2).map(String::as_str), args.get(3)) {
                (Some("--device"), Some(d)) => d.clone(),
                _ => "cpu".to_string(),
            };
            tune::runner::worker::worker_main(&device)
        }
        Some("bench") if args.get(2).map(String::as_str) == Some("trainer") => {
            match tune::train::bench::run(&tune::train::bench::BenchOptions::from_args(&args[3..])) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("tune bench trainer: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        _ => {
            eprintln!("usage: tune worker --device D | tune bench trainer");
            ExitCode::from(2)
        }
    }
}
