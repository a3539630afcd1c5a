//! `tune bench trainer --stream` (`tune-worker bench --stream`): the streaming data loader
//! against the in-memory path, for the same model, precision and batch on the same data
//! (Fashion-MNIST when installed, else the vendored digits): training samples/s and
//! `data_wait` (the fraction of training time spent waiting for a batch, as a trial reports
//! it) of each, best of `repeat` alternating runs. Streaming is forced as a study forces it,
//! with `device_cache = "never"`.
//!
//! Before anything is timed it checks, on the device measured, that the streamed batches
//! (pinned and copied on the loader's own stream on CUDA) are exactly the host loader's for
//! the same seed over two epochs' worth of batches.

use std::path::Path;
use std::time::{Duration, Instant};

use tch::Device;

use super::TrainError;
use super::bench::{BenchOptions, hyper};
use super::data::{self, Loader};
use super::fit::Session;
use super::stream::MIN_PREFETCH;
use tune::builtin::{Amp, DataSpec, DeviceCache, FASHION_MNIST_DIR, ModelKind, Source};

/// Batches the loader prepares ahead, as a study's default `prefetch`.
const PREFETCH: usize = 4;

/// Batches compared by the device check: at most this many (two epochs of digits).
const CHECK_BATCHES: usize = 2 * 1617 / 16;

/// One timed run: samples per second of training time and the fraction of it spent waiting
/// for batches.
#[derive(Debug, Clone, Copy, Default)]
pub struct Figures {
    pub samples_per_s: f64,
    pub data_wait: f64,
}

impl Figures {
    fn best(self, other: Figures) -> Figures {
        if other.samples_per_s > self.samples_per_s {
            other
        } else {
            self
        }
    }
}

/// The data measured: Fashion-MNIST's training images when installed, else the digits.
fn data_spec(cache: DeviceCache) -> (DataSpec, &'static str) {
    let fashion = Path::new(FASHION_MNIST_DIR);
    let (source, name) = if fashion.join("train-images-idx3-ubyte.gz").is_file() {
        (
            Source::FashionMnist {
                dir: fashion.to_path_buf(),
            },
            "Fashion-MNIST train (60 000 × 1×28×28)",
        )
    } else {
        (
            Source::Digits,
            "digits (1 797 × 1×8×8; Fashion-MNIST not installed)",
        )
    };
    let spec = DataSpec {
        source,
        validation: 0.1,
        limit: None,
        normalize: true,
        device_cache: cache,
        max_device_mb: 4096,
        prefetch: PREFETCH,
    };
    (spec, name)
}

/// Checks that the loader streaming to `device` gives exactly the batches of the loader
/// streaming on the host, for the same seed: `batches` of them (or two epochs, if fewer).
/// Returns how many were compared.
pub fn check_same_batches(
    ds: &data::Dataset,
    spec: &DataSpec,
    device: Device,
    batch: i64,
    batches: usize,
) -> Result<usize, String> {
    let spec = DataSpec {
        device_cache: DeviceCache::Never,
        ..spec.clone()
    };
    let mut on_device = Loader::new(ds, device, batch, None, &spec, 7);
    let mut on_host = Loader::new(ds, Device::Cpu, batch, None, &spec, 7);
    let n = batches.min(2 * on_host.batches_per_epoch().max(0) as usize);
    for i in 0..n {
        let (a, _) = on_device.next_batch()?;
        let (b, _) = on_host.next_batch()?;
        if a.x.device() != device {
            return Err(format!(
                "batch {i} arrived on {:?}, not {device:?}",
                a.x.device()
            ));
        }
        if !(a.x.to_device(Device::Cpu).equal(&b.x) && a.y.to_device(Device::Cpu).equal(&b.y)) {
            return Err(format!(
                "batch {i} streamed to {device:?} differs from the host loader's"
            ));
        }
    }
    Ok(n)
}

/// Trains `warmup` then `steps` steps of `model` in `amp` with data held (`cache`) or
/// streamed, and returns the timed steps' figures.
pub fn measure(
    ds: &data::Dataset,
    spec: &DataSpec,
    model: ModelKind,
    amp: Amp,
    o: &BenchOptions,
) -> Result<Figures, String> {
    tch::manual_seed(0);
    let device = o.device;
    let h = hyper(model, amp, o.batch, false);
    let mut s = Session::new(&h, ds.task, &ds.sample_shape, device, h.lr)?;
    let mut loader = Loader::new(ds, device, h.batch_size, None, spec, 0);
    // As in a trial: reading the loss syncs the device, so on CUDA it is read every 16 steps.
    let check_every = if device.is_cuda() { 16 } else { 1 };
    let sync = || {
        if let Device::Cuda(i) = device {
            tch::Cuda::synchronize(i as i64);
        }
    };
    // One step; returns the time spent waiting for its batch.
    let mut step = |s: &mut Session, n: usize| -> Result<Duration, String> {
        let mut waited = Duration::ZERO;
        let mut next = || {
            let (b, w) = loader.next_batch().map_err(TrainError::Failed)?;
            waited += w;
            Ok(b)
        };
        let loss = s.accumulate(&mut next, 1).map_err(|e| e.to_string())?;
        if (n + 1).is_multiple_of(check_every)
            && amp != Amp::Fp16
            && !loss.double_value(&[]).is_finite()
        {
            return Err("the benchmark diverged".into());
        }
        s.apply().map_err(|e| e.to_string())?;
        Ok(waited)
    };
    for n in 0..o.warmup {
        step(&mut s, n)?;
    }
    sync();
    let mut wait = Duration::ZERO;
    let t0 = Instant::now();
    for n in 0..o.steps {
        wait += step(&mut s, n)?;
    }
    sync();
    let secs = t0.elapsed().as_secs_f64().max(1e-9);
    Ok(Figures {
        samples_per_s: o.steps as f64 * o.batch as f64 / secs,
        data_wait: wait.as_secs_f64() / secs,
    })
}

/// Runs the comparison and prints a table.
pub fn run(o: &BenchOptions) -> Result<(), String> {
    if o.device.is_cuda() && !tch::Cuda::is_available() {
        return Err(format!(
            "--device {:?}: this tune-worker sees no CUDA device (build it with CUDA: ./scripts/setup.sh --cuda)",
            o.device
        ));
    }
    if let Some(m) = o
        .models
        .iter()
        .find(|m| !matches!(m, ModelKind::Mlp | ModelKind::Cnn | ModelKind::Resnet))
    {
        return Err(format!(
            "--stream: measures the image models (mlp, cnn, resnet), not {}",
            m.as_str()
        ));
    }
    let (held, data_name) = data_spec(DeviceCache::Always);
    let streamed = DataSpec {
        device_cache: DeviceCache::Never,
        ..held.clone()
    };
    let ds = data::load(&held).map_err(|e| e.to_string())?;
    if ds.train.len() < o.batch {
        return Err(format!(
            "--batch {}: larger than the training set ({} samples)",
            o.batch,
            ds.train.len()
        ));
    }
    // One intra-op thread, as in a trial's worker; set only once every check has passed (see
    // `bench::run`: resizing the pools after a convolution corrupts the heap).
    tch::set_num_threads(1);
    let checked = check_same_batches(&ds, &held, o.device, o.batch, CHECK_BATCHES)?;
    println!(
        "tune bench trainer --stream: {data_name} on {:?}; batch {}, Adam, {} timed steps after {} warm-up, best of {} alternating runs; 1 intra-op thread; streamed = device_cache \"never\", prefetch {PREFETCH} (at least {MIN_PREFETCH}){}",
        o.device,
        o.batch,
        o.steps,
        o.warmup,
        o.repeat,
        if o.device.is_cuda() {
            ", pinned, copied on the loader's own CUDA stream"
        } else {
            ""
        }
    );
    println!(
        "check: {checked} streamed batches on {:?} are exactly the host loader's (same seed)",
        o.device
    );
    let configs: Vec<(ModelKind, Amp)> = o
        .models
        .iter()
        .flat_map(|m| o.amps.iter().map(move |a| (*m, *a)))
        .collect();
    let mut rows = vec![(Figures::default(), Figures::default()); configs.len()];
    for _ in 0..o.repeat.max(1) {
        for (i, (m, a)) in configs.iter().enumerate() {
            rows[i].0 = rows[i].0.best(measure(&ds, &held, *m, *a, o)?);
            rows[i].1 = rows[i].1.best(measure(&ds, &streamed, *m, *a, o)?);
        }
    }
    println!(
        "{:<7} {:<5} | {:>14} {:>9} | {:>14} {:>9} | {:>8}",
        "model", "amp", "in-memory /s", "data_wait", "streamed /s", "data_wait", "ratio"
    );
    for ((m, a), (h, s)) in configs.iter().zip(&rows) {
        println!(
            "{:<7} {:<5} | {:>14.0} {:>9.3} | {:>14.0} {:>9.3} | {:>8.3}",
            m.as_str(),
            a.to_string(),
            h.samples_per_s,
            h.data_wait,
            s.samples_per_s,
            s.data_wait,
            s.samples_per_s / h.samples_per_s.max(1e-9)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_stream_bench_refuses_the_language_model_before_anything_runs() {
        let o = BenchOptions::from_args(&args(&["--stream", "--models", "mlp,transformer"]))
            .expect("valid");
        let e = run(&o).expect_err("not an image model");
        assert_eq!(
            e,
            "--stream: measures the image models (mlp, cnn, resnet), not transformer"
        );
    }

    #[test]
    fn streamed_and_held_digits_train_and_the_streamed_batches_pass_the_check() {
        let _rng = crate::torch_rng_lock();
        let spec = DataSpec {
            source: Source::Digits,
            ..data_spec(DeviceCache::Always).0
        };
        let ds = data::load(&spec).expect("digits load");
        // 1 617 training digits in batches of 16: 101 a epoch, a partial last batch.
        assert_eq!(
            check_same_batches(&ds, &spec, Device::Cpu, 16, CHECK_BATCHES),
            Ok(202)
        );
        let o = BenchOptions::from_args(&args(&["--steps", "4", "--batch", "16"])).expect("valid");
        let o = BenchOptions { warmup: 1, ..o };
        for cache in [DeviceCache::Always, DeviceCache::Never] {
            let spec = DataSpec {
                device_cache: cache,
                ..spec.clone()
            };
            let f = measure(&ds, &spec, ModelKind::Mlp, Amp::Off, &o).expect("trains");
            assert!(f.samples_per_s > 0.0, "{f:?}");
            assert!((0.0..=1.0).contains(&f.data_wait), "{f:?}");
        }
    }
}
