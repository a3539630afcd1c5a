//! `tune-worker`: the process that hosts libtorch.
//!
//! The orchestrator (`tune`) never links libtorch: its shared libraries take half a second to
//! load, which every query would pay, a crash inside libtorch must not take the study down, and
//! users of command trials should not need it at all. `tune` starts one long-lived
//! `tune-worker worker --device D` per slot and talks to it over JSON lines (see
//! `tune::runner::protocol`); `tune bench trainer` runs `tune-worker bench …`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("worker") => {
            let device = match (args.get(2).map(String::as_str), args.get(3)) {
                (Some("--device"), Some(d)) => d.clone(),
                (None, _) => "cpu".to_string(),
                _ => {
                    eprintln!("usage: tune-worker worker [--device cpu|cuda:N]");
                    return ExitCode::from(2);
                }
            };
            tune_train::worker::worker_main(&device)
        }
        Some("--capabilities") => {
            // One JSON line (tune::runner::protocol::Capabilities): `tune run` asks before a
            // builtin study on CUDA starts.
            let caps = tune::runner::protocol::Capabilities {
                cuda: cfg!(feature = "cuda"),
                cuda_devices: usize::try_from(tch::Cuda::device_count()).unwrap_or(0),
            };
            match serde_json::to_string(&caps) {
                Ok(line) => {
                    println!("{line}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("tune-worker: cannot encode the capabilities: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Some("bench") => {
            let opts = match tune_train::bench::BenchOptions::from_args(&args[2..]) {
                Ok(o) => o,
                Err(e) => {
                    eprintln!("tune bench trainer: {e}");
                    return ExitCode::from(2);
                }
            };
            // `--stream`: the streaming data loader against the in-memory path.
            let result = if args[2..].iter().any(|a| a == "--stream") {
                tune_train::stream_bench::run(&opts)
            } else {
                tune_train::bench::run(&opts)
            };
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("tune bench trainer: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        _ => {
            eprintln!(
                "tune-worker hosts libtorch for tune; it is started by `tune run`.\n\
                 usage: tune-worker worker [--device cpu|cuda:N]\n       tune-worker --capabilities\n       tune-worker bench [--device cpu|cuda:N] [--steps N] [--models mlp,cnn] [--amp off,bf16,fp16] [--checkpointing off,on] [--cuda-graphs on,off] [--stream]"
            );
            ExitCode::from(2)
        }
    }
}
