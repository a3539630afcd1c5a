//! Mixed precision: autocast regions on CPU and CUDA through a small C++ shim (tch's own
//! `autocast` is CUDA-only), and dynamic loss scaling for fp16.
//!
//! Autocast state is thread-local in libtorch: a guard must be created and dropped on the
//! thread that runs the forward pass.

use std::os::raw::c_int;

use tch::{Device, Kind, Tensor};

use tune::builtin::Amp;

unsafe extern "C" {
    fn tune_autocast_enter(
        device: c_int,
        dtype: c_int,
        prev_enabled: *mut c_int,
        prev_dtype: *mut c_int,
    ) -> c_int;
    fn tune_autocast_exit(device: c_int, prev_enabled: c_int, prev_dtype: c_int) -> c_int;
    fn tune_autocast_is_enabled(device: c_int) -> c_int;
}

fn device_code(device: Device) -> c_int {
    if device.is_cuda() { 1 } else { 0 }
}

/// An autocast region: ops inside run in the lower precision where libtorch's autocast
/// lists say so (matmuls, convolutions), and stay in f32 where that is safer (losses,
/// reductions). Leaving the region (drop) restores the state before it.
pub struct Autocast {
    device: c_int,
    prev_enabled: c_int,
    prev_dtype: c_int,
    active: bool,
}

impl Autocast {
    /// Enters a region for `amp` on `device`; `Amp::Off` gives an inert guard.
    pub fn enter(amp: Amp, device: Device) -> Result<Autocast, String> {
        let dev = device_code(device);
        let dtype = match amp {
            Amp::Off => {
                return Ok(Autocast {
                    device: dev,
                    prev_enabled: 0,
                    prev_dtype: 0,
                    active: false,
                });
            }
            Amp::Bf16 => 0,
            Amp::Fp16 => 1,
        };
        let (mut prev_enabled, mut prev_dtype) = (0, 0);
        // SAFETY: the shim catches every C++ exception and writes only the two out-params.
        let rc = unsafe { tune_autocast_enter(dev, dtype, &mut prev_enabled, &mut prev_dtype) };
        if rc != 0 {
            return Err(format!(
                "libtorch refused to enter an autocast region ({amp})"
            ));
        }
        Ok(Autocast {
            device: dev,
            prev_enabled,
            prev_dtype,
            active: true,
        })
    }

    /// Whether autocast is on for `device` on this thread.
    pub fn is_enabled(device: Device) -> bool {
        // SAFETY: reads thread-local state; exceptions are caught in the shim.
        unsafe { tune_autocast_is_enabled(device_code(device)) == 1 }
    }
}

impl Drop for Autocast {
    fn drop(&mut self) {
        if self.active {
            // SAFETY: pairs with the successful enter of this guard; exceptions are caught.
            unsafe {
                tune_autocast_exit(self.device, self.prev_enabled, self.prev_dtype);
            }
        }
    }
}

/// Dynamic loss scaling for fp16, as `torch.amp.GradScaler`: the loss is multiplied by a
/// scale before backward so small gradients survive fp16; gradients are unscaled before the
/// step; a step whose gradients hold an inf or NaN is skipped and the scale backs off; after
/// `growth_interval` clean steps the scale grows.
pub struct GradScaler {
    scale: Tensor,
    growth_tracker: Tensor,
    found_inf: Tensor,
    growth_factor: f64,
    backoff_factor: f64,
    growth_interval: i64,
}

impl GradScaler {
    pub fn new(device: Device, init_scale: f64) -> GradScaler {
        GradScaler {
            scale: Tensor::full([1], init_scale, (Kind::Float, device)),
            growth_tracker: Tensor::zeros([1], (Kind::Int, device)),
            found_inf: Tensor::zeros([1], (Kind::Float, device)),
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
        }
    }

    /// The scale and growth tracker, for a checkpoint.
    pub fn state(&self) -> (&Tensor, &Tensor) {
        (&self.scale, &self.growth_tracker)
    }

    /// Puts back what [`GradScaler::state`] gave, in place (the tensors a CUDA graph may hold).
    pub fn restore(&mut self, scale: &Tensor, growth_tracker: &Tensor) {
        tch::no_grad(|| {
            self.scale.copy_(scale);
            self.growth_tracker.copy_(growth_tracker);
        });
    }

    pub fn scale_value(&self) -> f64 {
        self.scale.double_value(&[0])
    }

    /// The loss multiplied by the current scale, ready for backward.
    pub fn scale_loss(&self, loss: &Tensor) -> Tensor {
        loss * &self.scale.to_kind(loss.kind())
    }

    /// Unscales the gradients in place and says whether they are all finite (a sync).
    pub fn unscale(&mut self, params: &[Tensor]) -> bool {
        self.unscale_on_device(params).is_ok() && self.all_finite()
    }

    /// Unscales the gradients in place and flags a non-finite one in [`found_inf`], in one
    /// multi-tensor kernel, without reading anything back.
    ///
    /// [`found_inf`]: GradScaler::found_inf
    pub fn unscale_on_device(&mut self, params: &[Tensor]) -> Result<(), String> {
        let _ = self.found_inf.zero_();
        let inv = self.scale.reciprocal();
        crate::optim::unscale(params, &self.found_inf, &inv)
    }

    /// 1 where the last unscaled gradients held an inf or NaN, else 0 (on the device).
    pub fn found_inf(&self) -> &Tensor {
        &self.found_inf
    }

    /// Whether the last unscaled gradients were all finite (reads the flag: a sync).
    pub fn all_finite(&self) -> bool {
        self.found_inf.double_value(&[0]) == 0.0
    }

    /// Updates the scale after a step (taken or skipped), from what `unscale` found.
    pub fn update(&mut self) {
        let _ = self.scale.internal_amp_update_scale_(
            &self.growth_tracker,
            &self.found_inf,
            self.growth_factor,
            self.backoff_factor,
            self.growth_interval,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_autocast_really_computes_in_bf16_on_the_cpu() {
        let _rng = crate::torch_rng_lock();
        let a = Tensor::randn([4, 8], (Kind::Float, Device::Cpu));
        let w = Tensor::randn([3, 8], (Kind::Float, Device::Cpu));
        {
            let _g = Autocast::enter(Amp::Bf16, Device::Cpu).expect("enter");
            assert!(Autocast::is_enabled(Device::Cpu));
            let y = a.linear(&w, None::<Tensor>);
            assert_eq!(y.kind(), Kind::BFloat16);
        }
        assert!(!Autocast::is_enabled(Device::Cpu));
        assert_eq!(a.linear(&w, None::<Tensor>).kind(), Kind::Float);
    }

    #[test]
    fn loss_scaling_skips_a_step_with_overflowing_gradients_and_backs_off() {
        let _rng = crate::torch_rng_lock();
        let p = Tensor::ones([3], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        let mut scaler = GradScaler::new(Device::Cpu, 65536.0);
        // A gradient of 1e35 times the scale overflows f32 to inf.
        let loss = (&p * 1e35).sum(Kind::Float);
        scaler.scale_loss(&loss).backward();
        let finite = scaler.unscale(std::slice::from_ref(&p));
        assert!(!finite, "overflow must be found");
        scaler.update();
        assert_eq!(scaler.scale_value(), 32768.0);

        let mut g = p.grad();
        let _ = g.zero_();
        let loss = (&p * 2.0).sum(Kind::Float);
        scaler.scale_loss(&loss).backward();
        assert!(scaler.unscale(std::slice::from_ref(&p)));
        let g = p.grad();
        assert!((g.double_value(&[0]) - 2.0).abs() < 1e-6, "unscaled");
    }
}
