//! A trial's running training loss: the sum and count of the finite step losses since the
//! last report, and the run of non-finite ones that ends in a divergence.
//!
//! Where it is kept depends on the device. On CUDA on the device: reading a loss is a sync that
//! drains the launch queue, so the book adds each step's loss with a few tensor ops and the
//! loop reads it only every few steps. Those ops work in place on three scalars allocated once,
//! so that a CUDA graph (`graph`) captures them with the step and every replay counts its loss. On the CPU on the host: a scalar read there costs
//! nothing, while each of those tensor ops is a dispatch and an allocation (nine per step on
//! the device-side path), all for a bookkeeping a `f64` does. Issue 31 asked for the CPU path
//! to carry none of the GPU's bookkeeping; [`LossBook::new`] is where the branch is taken.
//!
//! What does not belong here: when to read (the training loop's `check_every`), and what a
//! divergence means for a trial (fp16's overflow tolerance).

use tch::{Device, Kind, Tensor};

/// The running loss of the current report interval.
pub enum LossBook {
    /// On the host: one read of each step's loss (the CPU path).
    Host { sum: f64, steps: u64, run: u64 },
    /// On the device: nothing read until asked (the CUDA path).
    Device {
        sum: Tensor,
        steps: Tensor,
        run: Tensor,
    },
}

impl LossBook {
    /// The book for a trial on `device`: on the host for the CPU, on the device otherwise.
    pub fn new(device: Device) -> LossBook {
        if device == Device::Cpu {
            LossBook::Host {
                sum: 0.0,
                steps: 0,
                run: 0,
            }
        } else {
            LossBook::on_device(device)
        }
    }

    /// The device-side book, whatever the device (the CUDA path; tests run it on the CPU).
    pub fn on_device(device: Device) -> LossBook {
        let zero = || Tensor::zeros([], (Kind::Float, device));
        LossBook::Device {
            sum: zero(),
            steps: zero(),
            run: zero(),
        }
    }

    /// Adds one step's (detached, scalar) loss: a finite one to the interval's mean, a
    /// non-finite one to the run of them; a finite one ends the run.
    pub fn add(&mut self, loss: &Tensor) {
        match self {
            LossBook::Host { sum, steps, run } => {
                let v = loss.double_value(&[]);
                if v.is_finite() {
                    *sum += v;
                    *steps += 1;
                    *run = 0;
                } else {
                    *run += 1;
                }
            }
            LossBook::Device { sum, steps, run } => {
                // In place: the tensors are the ones a captured graph writes on every replay.
                let finite = loss.isfinite();
                *sum += loss.nan_to_num(0.0, 0.0, 0.0);
                *steps += finite.to_kind(Kind::Float);
                // (run + 1) when this loss is not finite, 0 when it is.
                *run += 1.0;
                *run *= finite.logical_not().to_kind(Kind::Float);
            }
        }
    }

    /// How many steps in a row, up to the last one added, had a non-finite loss (on the
    /// device path a read, so a sync).
    pub fn nonfinite_run(&self) -> u64 {
        match self {
            LossBook::Host { run, .. } => *run,
            LossBook::Device { run, .. } => run.double_value(&[]) as u64,
        }
    }

    /// The mean of the interval's finite losses; `None` when it had none (a read on the
    /// device path).
    pub fn mean(&self) -> Option<f64> {
        let (sum, steps) = match self {
            LossBook::Host { sum, steps, .. } => (*sum, *steps as f64),
            LossBook::Device { sum, steps, .. } => (sum.double_value(&[]), steps.double_value(&[])),
        };
        (steps > 0.0).then(|| sum / steps)
    }

    /// The interval's sum, count and run so far, for a checkpoint (a read on the device path).
    pub fn tally(&self) -> crate::snapshot::Tally {
        match self {
            LossBook::Host { sum, steps, run } => crate::snapshot::Tally {
                sum: *sum,
                steps: *steps,
                run: *run,
            },
            LossBook::Device { sum, steps, run } => crate::snapshot::Tally {
                sum: sum.double_value(&[]),
                steps: steps.double_value(&[]) as u64,
                run: run.double_value(&[]) as u64,
            },
        }
    }

    /// Puts back a [`LossBook::tally`] (in place on the device path).
    pub fn restore(&mut self, t: crate::snapshot::Tally) {
        match self {
            LossBook::Host { sum, steps, run } => {
                (*sum, *steps, *run) = (t.sum, t.steps, t.run);
            }
            LossBook::Device { sum, steps, run } => {
                let _ = sum.fill_(t.sum);
                let _ = steps.fill_(t.steps as f64);
                let _ = run.fill_(t.run as f64);
            }
        }
    }

    /// Starts the next report interval: the sum and count go back to zero; the run of
    /// non-finite losses goes on across it, as divergence does.
    pub fn next_interval(&mut self) {
        match self {
            LossBook::Host { sum, steps, .. } => {
                *sum = 0.0;
                *steps = 0;
            }
            LossBook::Device { sum, steps, .. } => {
                let _ = sum.zero_();
                let _ = steps.zero_();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalar(v: f64) -> Tensor {
        Tensor::from(v as f32)
    }

    /// (the run after each loss, the mean at the end) for `losses` added to `book`.
    fn replay(mut book: LossBook, losses: &[f64]) -> (Vec<u64>, Option<f64>) {
        let runs = losses
            .iter()
            .map(|&v| {
                book.add(&scalar(v));
                book.nonfinite_run()
            })
            .collect();
        (runs, book.mean())
    }

    #[test]
    fn a_trial_on_the_cpu_keeps_its_loss_on_the_host() {
        // The CPU path must not pay the device path's tensor ops per step (issue 31).
        assert!(matches!(LossBook::new(Device::Cpu), LossBook::Host { .. }));
    }

    #[test]
    fn the_host_and_device_books_agree_on_means_and_runs_of_non_finite_losses() {
        let losses = [1.5, f64::NAN, f64::INFINITY, 2.0, f64::NEG_INFINITY, 0.25];
        let (host_runs, host_mean) = replay(LossBook::new(Device::Cpu), &losses);
        let (dev_runs, dev_mean) = replay(LossBook::on_device(Device::Cpu), &losses);
        assert_eq!(host_runs, [0, 1, 2, 0, 1, 0]);
        assert_eq!(dev_runs, host_runs);
        let (h, d) = (host_mean.expect("finite losses"), dev_mean.expect("finite"));
        assert!((h - 1.25).abs() < 1e-12, "host mean {h}");
        assert!((d - 1.25).abs() < 1e-6, "device mean {d}");
    }

    #[test]
    fn an_interval_of_only_non_finite_losses_has_no_mean_and_its_run_carries_on() {
        for mut book in [LossBook::new(Device::Cpu), LossBook::on_device(Device::Cpu)] {
            book.add(&scalar(3.0));
            book.next_interval();
            assert_eq!(book.mean(), None);
            book.add(&scalar(f64::NAN));
            book.next_interval();
            book.add(&scalar(f64::NAN));
            assert_eq!(book.mean(), None);
            assert_eq!(book.nonfinite_run(), 2);
            book.add(&scalar(4.0));
            assert_eq!(book.mean(), Some(4.0));
            assert_eq!(book.nonfinite_run(), 0);
        }
    }

    #[test]
    fn the_device_book_counts_in_place_so_a_captured_graph_keeps_counting() {
        let mut book = LossBook::on_device(Device::Cpu);
        let LossBook::Device { sum, run, .. } = &book else {
            panic!("a device book")
        };
        let (sum_ptr, run_ptr) = (sum.data_ptr(), run.data_ptr());
        for v in [1.0, f64::NAN, 2.0] {
            book.add(&scalar(v));
        }
        book.next_interval();
        book.add(&scalar(4.0));
        assert_eq!(book.mean(), Some(4.0));
        let LossBook::Device { sum, run, .. } = &book else {
            panic!("a device book")
        };
        assert_eq!(sum.data_ptr(), sum_ptr);
        assert_eq!(run.data_ptr(), run_ptr);
    }
}
