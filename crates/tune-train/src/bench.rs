//! `tune bench trainer`: trains the same model on the same data with the same batch,
//! optimizer and precision in tune's trainer and in PyTorch eager (`benches/torch_baseline.py`,
//! the same torch 2.13.0, run in the same invocation), and prints samples/s of each and their
//! ratio, for the MLP and the CNN in fp32, bf16 and fp16, on the CPU or a CUDA device
//! (`--device cuda:N`). One intra-op thread on both sides, as in a trial. Each figure is the
//! best of `repeat` timed runs, so that other load on the machine penalises neither side more
//! than the other.
//!
//! The eager side runs with its fastest defaults: Adam with `foreach=True` (one kernel per
//! step for all parameters) and, for the CNN, channels-last as tune does
//! (`--torch-default-layout` measures eager's default layout instead). On CUDA both sides
//! are timed between device syncs, and read the loss every 16 steps as a trial does.
//!
//! tune's step is replayed from a CUDA graph on a GPU, as in a trial (`[trial] cuda_graphs`);
//! `--cuda-graphs on,off` measures both, prints a `graphs` column (`on`: replayed, `off`:
//! eager as asked, `eager`: asked for but not captured) and, per model and precision, the
//! graphs' speed-up over eager steps with the mean loss of each side's timed steps (the same
//! seed and batches, so the two agree when the replayed step computes what the eager one does).
//! `--checkpointing off,on` adds the ResNet's and the Transformer's rows with gradient
//! checkpointing (`+ckpt`; tune alone, eager has none), and every tune row says its peak memory:
//! MB above what was in use before the model was built (the caching allocator's peak
//! allocation on CUDA, the peak resident set on the CPU; see `memory`), the lowest of the
//! runs. So one command gives memory saved against speed lost.
//!
//! Needs `scripts/setup.sh --bench` (the Python side: torch's pure-Python dependencies and the
//! CUDA libraries its extension module links against).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use tch::Device;

use super::data::{self, Loader};
use super::fit::Session;
use super::graph::Stepper;
use super::loss_book::LossBook;
use super::memory::PeakMemory;
use tune::builtin::{
    Amp, CudaGraphs, DataSpec, DeviceCache, FASHION_MNIST_DIR, Hyper, LrScaling, ModelKind,
    OptimizerKind, ScheduleKind, Source,
};

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub models: Vec<ModelKind>,
    pub amps: Vec<Amp>,
    pub batch: i64,
    pub warmup: usize,
    pub steps: usize,
    pub repeat: usize,
    /// Skip the PyTorch side (tune's figures only).
    pub no_python: bool,
    /// Run the PyTorch CNN in channels-last layout (as tune does: the default), or in eager's
    /// default layout (`--torch-default-layout`).
    pub torch_channels_last: bool,
    /// Where both sides train (`--device cpu|cuda:N`).
    pub device: Device,
    /// tune's step replayed from a CUDA graph (`true`, as a trial does by default) or eager,
    /// each measured (`--cuda-graphs on,off`); on the CPU both are eager.
    pub cuda_graphs: Vec<bool>,
    /// Gradient checkpointing off and/or on (`--checkpointing off,on`); it applies to the
    /// ResNet and the Transformer, whose `on` rows tune measures alone (eager has none).
    pub checkpointing: Vec<bool>,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            models: vec![ModelKind::Mlp, ModelKind::Cnn],
            amps: vec![Amp::Off, Amp::Bf16],
            batch: 128,
            warmup: 20,
            steps: 200,
            repeat: 3,
            no_python: false,
            torch_channels_last: true,
            device: Device::Cpu,
            cuda_graphs: vec![true],
            checkpointing: vec![false],
        }
    }
}

impl BenchOptions {
    /// `--steps N --warmup N --batch N --repeat N --models mlp,cnn --amp off,bf16,fp16 --device cuda:0
    /// --cuda-graphs on,off --checkpointing off,on --no-python --torch-default-layout`; unknown
    /// words are ignored (cargo bench passes its own); a device that is not one is an error, and
    /// so is a `--cuda-graphs` or `--checkpointing` word other than on and off.
    pub fn from_args(args: &[String]) -> Result<BenchOptions, String> {
        let mut o = BenchOptions::default();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--steps" => o.steps = it.next().and_then(|v| v.parse().ok()).unwrap_or(o.steps),
                "--batch" => o.batch = it.next().and_then(|v| v.parse().ok()).unwrap_or(o.batch),
                "--repeat" => o.repeat = it.next().and_then(|v| v.parse().ok()).unwrap_or(o.repeat),
                "--warmup" => o.warmup = it.next().and_then(|v| v.parse().ok()).unwrap_or(o.warmup),
                "--models" => {
                    if let Some(v) = it.next() {
                        o.models = v
                            .split(',')
                            .filter_map(|m| match m {
                                "mlp" => Some(ModelKind::Mlp),
                                "cnn" => Some(ModelKind::Cnn),
                                "resnet" => Some(ModelKind::Resnet),
                                "transformer" => Some(ModelKind::Transformer),
                                _ => None,
                            })
                            .collect();
                    }
                }
                "--amp" => {
                    if let Some(v) = it.next() {
                        o.amps = v
                            .split(',')
                            .filter_map(|m| match m {
                                "off" | "fp32" => Some(Amp::Off),
                                "bf16" => Some(Amp::Bf16),
                                "fp16" => Some(Amp::Fp16),
                                _ => None,
                            })
                            .collect();
                    }
                }
                "--cuda-graphs" => {
                    let v = it.next().map(String::as_str).unwrap_or("");
                    o.cuda_graphs = v
                        .split(',')
                        .map(|w| match w {
                            "on" => Ok(true),
                            "off" => Ok(false),
                            _ => Err(format!(
                                "--cuda-graphs: {w:?} is neither on nor off (e.g. --cuda-graphs on,off)"
                            )),
                        })
                        .collect::<Result<_, _>>()?;
                }
                "--checkpointing" => {
                    let v = it.next().map(String::as_str).unwrap_or("");
                    o.checkpointing = v
                        .split(',')
                        .map(|w| match w {
                            "off" | "false" => Ok(false),
                            "on" | "true" => Ok(true),
                            _ => Err(format!(
                                "--checkpointing: {w:?} is neither on nor off (e.g. off,on)"
                            )),
                        })
                        .collect::<Result<_, _>>()?;
                }
                "--no-python" => o.no_python = true,
                // The default now; still accepted from older command lines.
                "--torch-channels-last" => o.torch_channels_last = true,
                "--torch-default-layout" => o.torch_channels_last = false,
                "--device" => {
                    let v = it.next().map(String::as_str).unwrap_or("");
                    o.device = crate::worker::parse_device(v).ok_or_else(|| {
                        format!("--device: {v:?} is not a device (cpu, cuda or cuda:N)")
                    })?;
                }
                _ => {}
            }
        }
        Ok(o)
    }
}

/// The Transformer's width, heads and context (its depth is 2, as every model's here); the
/// Python side takes the same (`--tf-width`, `--tf-heads`, `--tf-context`).
const TRANSFORMER: (i64, i64, i64) = (128, 4, 128);

pub(crate) fn hyper(model: ModelKind, amp: Amp, batch: i64, checkpointing: bool) -> Hyper {
    Hyper {
        model,
        lr: 1e-3,
        optimizer: OptimizerKind::Adam,
        momentum: 0.9,
        nesterov: false,
        weight_decay: 0.0,
        batch_size: batch,
        accumulation: 1,
        amp,
        schedule: ScheduleKind::Constant,
        warmup: 0.0,
        lr_scaling: LrScaling::None,
        reference_batch: batch,
        clip_grad: 0.0,
        epochs: None,
        time_budget: None,
        report_every: 0,
        width: match model {
            ModelKind::Mlp => 256,
            ModelKind::Resnet => 16,
            ModelKind::Transformer => TRANSFORMER.0,
            ModelKind::Cnn => 32,
        },
        depth: 2,
        dropout: 0.0,
        heads: TRANSFORMER.1,
        context: TRANSFORMER.2,
        checkpointing,
    }
}

/// Samples per second of one timed run of tune's training step (the loop of a trial: batch
/// from the on-device data set, forward under autocast, backward, optimizer step, loss check).
fn tune_once(
    ds: &data::Dataset,
    spec: &DataSpec,
    h: &Hyper,
    o: &BenchOptions,
    graphs: bool,
) -> Result<(Rate, bool, f64), String> {
    tch::manual_seed(0);
    let device = o.device;
    let memory = PeakMemory::start(device);
    let mut s = Session::new(h, ds.task, &ds.sample_shape, device, h.lr)?;
    // `auto`, as a trial: silent on the CPU, a one-line reason on a GPU that cannot capture.
    let setting = if graphs {
        CudaGraphs::Auto
    } else {
        CudaGraphs::Off
    };
    let mut stepper = Stepper::new(setting, h, device, &mut s);
    let mut tally = LossBook::new(device);
    let context = (h.model == ModelKind::Transformer).then_some(h.context);
    let mut loader = Loader::new(ds, device, h.batch_size, context, spec, 0);
    // As in a trial: reading the loss syncs the device, so on CUDA it is read every 16 steps.
    let check_every = if device.is_cuda() { 16 } else { 1 };
    let mut n = 0usize;
    let mut step = |s: &mut Session| -> Result<(), String> {
        let mut next = || {
            loader
                .next_batch()
                .map(|(b, _)| b)
                .map_err(super::TrainError::Failed)
        };
        let loss = stepper
            .step(s, &mut next, 1, &mut tally)
            .map_err(|e| e.to_string())?;
        n += 1;
        // fp16's overflowing steps are the loss scaler's business (skipped), not divergence.
        if n.is_multiple_of(check_every)
            && h.amp != Amp::Fp16
            && !loss.double_value(&[]).is_finite()
        {
            return Err("the benchmark diverged".into());
        }
        Ok(())
    };
    let sync = || {
        if let Device::Cuda(i) = device {
            tch::Cuda::synchronize(i as i64);
        }
    };
    for _ in 0..o.warmup {
        step(&mut s)?;
    }
    sync();
    let (t0, c0) = (Instant::now(), thread_cpu_secs());
    for _ in 0..o.steps {
        step(&mut s)?;
    }
    sync();
    let samples = o.steps as f64 * h.batch_size as f64;
    let rate = Rate {
        wall: samples / t0.elapsed().as_secs_f64(),
        cpu: samples / (thread_cpu_secs() - c0).max(1e-9),
        peak_mb: memory.and_then(|m| m.peak_above_start_mb()),
    };
    // The mean loss of the timed steps: graphs and eager steps start from the same seed and
    // see the same batches, so it says whether the replayed step computes what the eager one does.
    let loss = tally.mean().unwrap_or(f64::NAN);
    Ok((rate, stepper.replaying(), loss))
}

/// Samples per wall-clock second, and per second of the training thread's CPU time: with one
/// intra-op thread all compute runs on that thread, so the second is what other load on a
/// shared machine disturbs least.
/// With the peak memory of a tune run above the memory in use before its model was built
/// (parameters, optimizer state, activations; see [`PeakMemory`]).
#[derive(Debug, Clone, Copy, Default)]
struct Rate {
    wall: f64,
    cpu: f64,
    peak_mb: Option<f64>,
}

impl Rate {
    /// The best of two runs: the higher rates, and the lower peak (a run's peak is the same
    /// but for the allocator's fragmentation, which the lower one had less of).
    fn best(self, other: Rate) -> Rate {
        let peak_mb = match (self.peak_mb, other.peak_mb) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Rate {
            wall: self.wall.max(other.wall),
            cpu: self.cpu.max(other.cpu),
            peak_mb,
        }
    }
}

fn thread_cpu_secs() -> f64 {
    // SAFETY: clock_gettime writes only the timespec we pass.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above; CLOCK_THREAD_CPUTIME_ID is always valid on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// The PyTorch side's script, relative to the repository root.
const BASELINE_SCRIPT: &str = "crates/tune-train/benches/torch_baseline.py";

/// Where [`BASELINE_SCRIPT`] and `.venv/bench` are: `TUNE_REPO`, else the current directory
/// when it is a checkout (the usual case: run from the repository root), else the checkout
/// this binary was built from (this crate sits two levels below its root).
fn repo_root() -> PathBuf {
    if let Some(d) = std::env::var_os("TUNE_REPO") {
        return PathBuf::from(d);
    }
    match std::env::current_dir() {
        Ok(d) if d.join(BASELINE_SCRIPT).is_file() => d,
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."),
    }
}

/// The PyTorch side: one Python process (torch imports once) that measures one configuration
/// per request line.
struct Python {
    child: Child,
    stdin: ChildStdin,
    stdout: std::io::Lines<BufReader<ChildStdout>>,
}

impl Python {
    fn start(data_arg: &str, o: &BenchOptions) -> Result<Python, String> {
        let root = repo_root();
        let bench_deps = root.join(".venv/bench");
        if !bench_deps.exists() {
            return Err(
                "the PyTorch side needs `scripts/setup.sh --bench` (or pass --no-python)".into(),
            );
        }
        let nvidia_libs: Vec<String> = std::fs::read_dir(bench_deps.join("nvidia"))
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.path().join("lib"))
                    .filter(|p| p.is_dir())
                    .map(|p| p.display().to_string())
                    .collect()
            })
            .unwrap_or_default();
        let mut child = Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()))
            .arg(root.join(BASELINE_SCRIPT))
            .args(["--data", data_arg])
            .args(["--batch", &o.batch.to_string()])
            .args(["--steps", &o.steps.to_string()])
            .args(["--warmup", &o.warmup.to_string()])
            .args(["--device", &device_arg(o.device)])
            .arg("--text")
            .arg(root.join("datasets/gpl-3.0.txt"))
            .args(["--tf-width", &TRANSFORMER.0.to_string()])
            .args(["--tf-heads", &TRANSFORMER.1.to_string()])
            .args(["--tf-context", &TRANSFORMER.2.to_string()])
            .args(o.torch_channels_last.then_some("--channels-last"))
            .env(
                "PYTHONPATH",
                format!(
                    "{}:{}",
                    root.join(".libtorch").display(),
                    bench_deps.display()
                ),
            )
            .env("LD_LIBRARY_PATH", nvidia_libs.join(":"))
            .env("OMP_NUM_THREADS", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run python3: {e}"))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        let mut p = Python {
            child,
            stdin,
            stdout,
        };
        p.read()?; // {"ready": true}
        Ok(p)
    }

    fn read(&mut self) -> Result<serde_json::Value, String> {
        match self.stdout.next() {
            Some(Ok(line)) => serde_json::from_str(&line)
                .map_err(|e| format!("the PyTorch baseline said {line:?}: {e}")),
            _ => Err("the PyTorch baseline ended early (see its stderr above)".into()),
        }
    }

    fn measure(&mut self, model: ModelKind, amp: Amp) -> Result<Rate, String> {
        writeln!(self.stdin, "{}:{amp}", model.as_str()).map_err(|e| e.to_string())?;
        self.stdin.flush().map_err(|e| e.to_string())?;
        let v = self.read()?;
        let get = |k: &str| {
            v.get(k)
                .and_then(|v| v.as_f64())
                .ok_or_else(|| format!("the PyTorch baseline gave no {k}"))
        };
        Ok(Rate {
            wall: get("samples_per_s")?,
            cpu: get("samples_per_cpu_s")?,
            peak_mb: None,
        })
    }
}

impl Drop for Python {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A device as both tch and torch spell it.
fn device_arg(d: Device) -> String {
    match d {
        Device::Cuda(i) => format!("cuda:{i}"),
        _ => "cpu".into(),
    }
}

/// Runs the benchmark and prints a table.
pub fn run(o: &BenchOptions) -> Result<(), String> {
    if o.device.is_cuda() && !tch::Cuda::is_available() {
        return Err(format!(
            "--device {}: this tune-worker sees no CUDA device (build it with CUDA: ./scripts/setup.sh --cuda)",
            device_arg(o.device)
        ));
    }
    let fashion = Path::new(FASHION_MNIST_DIR);
    let (source, data_arg, data_name) = if fashion.join("train-images-idx3-ubyte.gz").is_file() {
        (
            Source::FashionMnist {
                dir: fashion.to_path_buf(),
            },
            fashion.display().to_string(),
            "Fashion-MNIST train (60 000 × 1×28×28)",
        )
    } else {
        (
            Source::Digits,
            "digits".to_string(),
            "digits (1 797 × 1×8×8; Fashion-MNIST not installed)",
        )
    };
    let spec = DataSpec {
        source,
        // The whole training file, as the Python side uses it.
        validation: 0.01,
        limit: None,
        normalize: true,
        device_cache: DeviceCache::Always,
        max_device_mb: 4096,
        prefetch: 4,
    };
    let ds = data::load(&spec).map_err(|e| e.to_string())?;
    // The Transformer is a language model: the vendored GPL-3 text as bytes, on both sides.
    let text_spec = DataSpec {
        source: Source::Gpl3Text,
        ..spec.clone()
    };
    let text = if o.models.contains(&ModelKind::Transformer) {
        Some(data::load(&text_spec).map_err(|e| e.to_string())?)
    } else {
        None
    };
    // Every model's training set must hold one batch, checked before anything runs.
    for m in &o.models {
        let (set, context) = match (&text, m) {
            (Some(t), ModelKind::Transformer) => (t, Some(TRANSFORMER.2)),
            _ => (&ds, None),
        };
        let samples = data::samples_in(set.train.len(), context);
        if samples < o.batch {
            return Err(format!(
                "--batch {}: larger than the {} model's training set ({samples} {})",
                o.batch,
                m.as_str(),
                context.map_or("samples".to_string(), |c| format!("windows of {c} tokens"))
            ));
        }
    }
    // (model, amp, CUDA graphs, checkpointing). Checkpointing applies to the models with blocks;
    // the others run without it only. On the CPU the step is eager whatever is asked: one graph
    // setting, not two alike rows.
    let configs: Vec<Config> = o
        .models
        .iter()
        .flat_map(|m| o.amps.iter().map(move |a| (*m, *a)))
        .flat_map(|(m, a)| {
            o.cuda_graphs
                .iter()
                .enumerate()
                .filter(move |(i, _)| o.device.is_cuda() || *i == 0)
                .map(move |(_, g)| (m, a, *g))
        })
        .flat_map(|(m, a, g)| {
            let blocks = matches!(m, ModelKind::Resnet | ModelKind::Transformer);
            o.checkpointing
                .iter()
                .filter(move |c| blocks || !**c)
                .map(move |c| (m, a, g, *c))
        })
        .collect();
    println!(
        "tune bench trainer: {data_name} on {}; batch {}, Adam (tune: {}; torch: foreach), {} timed steps after {} warm-up, best of {} alternating runs; 1 intra-op thread each side",
        device_arg(o.device),
        o.batch,
        if o.device.is_cuda() {
            "fused kernel"
        } else {
            "libtorch's loop"
        },
        o.steps,
        o.warmup,
        o.repeat
    );
    println!(
        "models: mlp = 784-256-256-10 ReLU; cnn = conv3x3(32)+pool, conv3x3(64)+pool, linear; resnet = CIFAR-style, width 16, 2 blocks a stage; transformer = 2 pre-norm layers, width 128, 4 heads, context 128, on GPL-3 bytes (conv models: tune channels-last; torch {})",
        if o.torch_channels_last {
            "channels-last"
        } else {
            "default layout"
        }
    );
    if o.device == Device::Cpu {
        // The tables of different machines differ most in bf16 (issue 31): say which this is.
        let cpu = crate::cpu::CpuInfo::this_machine();
        println!("cpu: {}; bf16: {}", cpu.model, cpu.bf16);
    }
    let mut python = if o.no_python {
        None
    } else {
        Some(Python::start(&data_arg, o)?)
    };
    // One intra-op thread, as in a trial's worker; set only once the arguments and the data
    // have passed every check. Hazard: resizing libtorch's thread pools after a convolution has
    // run (or while one runs) corrupts the heap, so a refusal must leave them as they were.
    tch::set_num_threads(1);
    // Runs alternate between the two sides, configuration by configuration, and each keeps
    // its best: a burst of load from other processes then costs both sides alike.
    let mut tune_rates = vec![Rate::default(); configs.len()];
    let mut replayed = vec![false; configs.len()];
    let mut losses = vec![f64::NAN; configs.len()];
    let mut torch = vec![Rate::default(); configs.len()];
    for _ in 0..o.repeat.max(1) {
        for (i, (m, a, g, c)) in configs.iter().enumerate() {
            let h = hyper(*m, *a, o.batch, *c);
            let (r, graphed, loss) = match (&text, *m) {
                (Some(t), ModelKind::Transformer) => tune_once(t, &text_spec, &h, o, *g)?,
                _ => tune_once(&ds, &spec, &h, o, *g)?,
            };
            tune_rates[i] = tune_rates[i].best(r);
            replayed[i] = graphed;
            losses[i] = loss;
            // Eager PyTorch once per model and precision (it has no checkpointing), whatever
            // tune's graph setting.
            let first = configs.iter().position(|k| k.0 == *m && k.1 == *a && !k.3) == Some(i);
            if let Some(p) = python.as_mut()
                && !*c
            {
                if first {
                    torch[i] = torch[i].best(p.measure(*m, *a)?);
                } else if let Some(j) = configs.iter().position(|k| k.0 == *m && k.1 == *a && !k.3)
                {
                    torch[i] = torch[j];
                }
            }
        }
    }
    let torch_rates = python.is_some().then_some(torch);
    println!(
        "{:<16} {:<5} {:<6} | {:>12} {:>12} {:>7} | {:>12} {:>12} {:>7} | {:>9} | {:>9}",
        "model",
        "amp",
        "graphs",
        "tune /s",
        "torch /s",
        "ratio",
        "tune /cpu-s",
        "torch /cpu-s",
        "ratio",
        "amp/fp32",
        "peak MB"
    );
    for (i, (m, a, g, c)) in configs.iter().enumerate() {
        let t = tune_rates[i];
        let fp32 = configs
            .iter()
            .position(|k| k.0 == *m && k.1 == Amp::Off && k.2 == *g && k.3 == *c)
            .map(|j| tune_rates[j]);
        // Against fp32 in wall time on CUDA (the launching thread's CPU time says little
        // there), in CPU time on the CPU.
        let speedup = match (a, fp32) {
            (Amp::Bf16 | Amp::Fp16, Some(f)) if o.device.is_cuda() => {
                format!("{:.2}", t.wall / f.wall)
            }
            (Amp::Bf16 | Amp::Fp16, Some(f)) => format!("{:.2}", t.cpu / f.cpu),
            _ => "-".into(),
        };
        let (pw, pc, rw, rc) = match &torch_rates {
            Some(p) if !*c => (
                format!("{:.0}", p[i].wall),
                format!("{:.0}", p[i].cpu),
                format!("{:.3}", t.wall / p[i].wall),
                format!("{:.3}", t.cpu / p[i].cpu),
            ),
            _ => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        let name = if *c {
            format!("{} +ckpt", m.as_str())
        } else {
            m.as_str().to_string()
        };
        println!(
            "{:<16} {:<5} {:<6} | {:>12.0} {:>12} {:>7} | {:>12.0} {:>12} {:>7} | {:>9} | {:>9}",
            name,
            a.to_string(),
            graphs_cell(*g, replayed[i]),
            t.wall,
            pw,
            rw,
            t.cpu,
            pc,
            rc,
            speedup,
            t.peak_mb.map_or("-".into(), |mb| format!("{mb:.0}"))
        );
    }
    // Graphs against eager steps, in wall time, where both were measured and the graph ran.
    for (i, (m, a, g, c)) in configs.iter().enumerate() {
        let eager = configs
            .iter()
            .position(|k| k.0 == *m && k.1 == *a && !k.2 && k.3 == *c);
        if let (true, true, Some(j)) = (*g, replayed[i], eager) {
            println!(
                "cuda graphs {} {}: {:.2}x eager steps ({:.0} vs {:.0} samples/s); mean loss of the timed steps {:.5} vs {:.5}",
                m.as_str(),
                a,
                tune_rates[i].wall / tune_rates[j].wall,
                tune_rates[i].wall,
                tune_rates[j].wall,
                losses[i],
                losses[j]
            );
        }
    }
    Ok(())
}

/// One measured configuration: the model, the precision, CUDA graphs asked for, checkpointing.
type Config = (ModelKind, Amp, bool, bool);

/// The `graphs` column: `on` when the steps were replayed from a CUDA graph, `off` when eager
/// steps were asked for, `eager` when a graph was asked for but not used (the CPU, or a step
/// that cannot be captured: the worker said why on stderr).
fn graphs_cell(asked: bool, replayed: bool) -> &'static str {
    match (asked, replayed) {
        (_, true) => "on",
        (false, false) => "off",
        (true, false) => "eager",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_device_and_fp16_are_read_from_the_arguments() {
        let o = BenchOptions::from_args(&args(&[
            "--device",
            "cuda:1",
            "--amp",
            "off,bf16,fp16",
            "--models",
            "mlp,resnet,transformer",
        ]))
        .expect("valid");
        assert_eq!(
            o.models,
            [ModelKind::Mlp, ModelKind::Resnet, ModelKind::Transformer]
        );
        assert_eq!(o.device, Device::Cuda(1));
        assert_eq!(o.amps, [Amp::Off, Amp::Bf16, Amp::Fp16]);
        assert!(o.torch_channels_last, "eager's fastest layout by default");
        let o = BenchOptions::from_args(&args(&["--torch-default-layout"])).expect("valid");
        assert_eq!(o.device, Device::Cpu);
        assert!(!o.torch_channels_last);
        let e = BenchOptions::from_args(&args(&["--device", "gpu0"])).expect_err("not a device");
        assert!(e.contains("\"gpu0\" is not a device"), "{e}");
    }

    #[test]
    fn cuda_graphs_are_measured_on_by_default_and_on_and_off_when_asked() {
        assert_eq!(
            BenchOptions::from_args(&[]).expect("valid").cuda_graphs,
            [true]
        );
        let o = BenchOptions::from_args(&args(&["--cuda-graphs", "on,off"])).expect("valid");
        assert_eq!(o.cuda_graphs, [true, false]);
        let e = BenchOptions::from_args(&args(&["--cuda-graphs", "on,maybe"]))
            .expect_err("not a setting");
        assert_eq!(
            e,
            "--cuda-graphs: \"maybe\" is neither on nor off (e.g. --cuda-graphs on,off)"
        );
        assert_eq!(graphs_cell(true, true), "on");
        assert_eq!(graphs_cell(false, false), "off");
        assert_eq!(graphs_cell(true, false), "eager");
    }

    #[test]
    fn checkpointing_is_off_by_default_and_read_as_a_list_of_on_and_off() {
        assert_eq!(
            BenchOptions::from_args(&[]).expect("valid").checkpointing,
            [false]
        );
        let o = BenchOptions::from_args(&args(&["--checkpointing", "off,on", "--warmup", "2"]))
            .expect("valid");
        assert_eq!(o.checkpointing, [false, true]);
        assert_eq!(o.warmup, 2);
        let e = BenchOptions::from_args(&args(&["--checkpointing", "off,yes"]))
            .expect_err("not on or off");
        assert_eq!(
            e,
            "--checkpointing: \"yes\" is neither on nor off (e.g. off,on)"
        );
    }

    #[test]
    fn a_cuda_device_this_worker_cannot_see_is_refused_with_the_fix() {
        if tch::Cuda::is_available() {
            return;
        }
        let o =
            BenchOptions::from_args(&args(&["--device", "cuda:0", "--no-python"])).expect("valid");
        let e = run(&o).expect_err("no CUDA here");
        assert!(e.contains("./scripts/setup.sh --cuda"), "{e}");
    }

    #[test]
    fn a_batch_larger_than_a_model_s_training_set_is_refused_before_anything_runs() {
        // The vendored text holds a few hundred windows of 128 bytes: a batch of 4096 is more
        // than that (the Fashion-MNIST or digits set of the MLP is not asked about first).
        let o = BenchOptions::from_args(&args(&[
            "--models",
            "transformer",
            "--batch",
            "4096",
            "--steps",
            "1",
            "--no-python",
        ]))
        .expect("valid");
        let e = run(&o).expect_err("too large a batch");
        assert!(
            e.starts_with("--batch 4096: larger than the transformer model's training set ("),
            "{e}"
        );
        assert!(e.contains("windows of 128 tokens"), "{e}");
    }
}
