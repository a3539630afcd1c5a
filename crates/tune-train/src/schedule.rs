//! Learning-rate schedules as a function of training progress in [0, 1]: `constant` (with an
//! optional linear warm-up), `cosine` (linear warm-up, then cosine decay to zero) and
//! `onecycle` (PyTorch's `OneCycleLR` shape: from `peak/25` up to `peak` over the first 30%,
//! or `warmup` when set, then cosine down to `peak/25/1e4`).
//!
//! Progress is steps taken over total steps when the trial trains for a number of epochs, or
//! elapsed over the time budget when that ends it first, so a time-budgeted trial still
//! completes its schedule.

use std::f64::consts::PI;

use tune::builtin::ScheduleKind;

#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    pub kind: ScheduleKind,
    pub peak: f64,
    /// Fraction of training spent warming up.
    pub warmup: f64,
}

impl Schedule {
    /// The learning rate at `progress` (clamped into [0, 1]).
    pub fn lr(&self, progress: f64) -> f64 {
        let p = progress.clamp(0.0, 1.0);
        let cos = |from: f64, to: f64, t: f64| to + (from - to) * 0.5 * (1.0 + (PI * t).cos());
        match self.kind {
            ScheduleKind::Constant => {
                if p < self.warmup {
                    self.peak * (p / self.warmup).max(1e-3)
                } else {
                    self.peak
                }
            }
            ScheduleKind::Cosine => {
                if p < self.warmup {
                    self.peak * (p / self.warmup).max(1e-3)
                } else {
                    cos(self.peak, 0.0, (p - self.warmup) / (1.0 - self.warmup))
                }
            }
            ScheduleKind::Onecycle => {
                let up = if self.warmup > 0.0 { self.warmup } else { 0.3 };
                let start = self.peak / 25.0;
                let end = start / 1e4;
                if p < up {
                    cos(start, self.peak, p / up)
                } else {
                    cos(self.peak, end, (p - up) / (1.0 - up))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_warms_up_peaks_and_decays_to_zero() {
        let s = Schedule {
            kind: ScheduleKind::Cosine,
            peak: 1.0,
            warmup: 0.1,
        };
        assert!((s.lr(0.05) - 0.5).abs() < 1e-9);
        assert!((s.lr(0.1) - 1.0).abs() < 1e-9);
        assert!((s.lr(0.55) - 0.5).abs() < 1e-9);
        assert!(s.lr(1.0).abs() < 1e-12);
    }

    #[test]
    fn onecycle_starts_low_peaks_at_thirty_percent_and_ends_lower_than_it_started() {
        let s = Schedule {
            kind: ScheduleKind::Onecycle,
            peak: 1.0,
            warmup: 0.0,
        };
        assert!((s.lr(0.0) - 0.04).abs() < 1e-9);
        assert!((s.lr(0.3) - 1.0).abs() < 1e-9);
        assert!(s.lr(1.0) < 1e-5);
    }
}
