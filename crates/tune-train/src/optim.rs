//! Optimizers: `sgd` (momentum, Nesterov), `adam`, `adamw` and `rmsprop`, each libtorch's own
//! C++ implementation through tch, with the trial's weight decay.

use tch::nn;

use tune::builtin::{Hyper, OptimizerKind};

/// Builds the optimizer of `h` over the variables of `vs`, at learning rate `lr`.
pub fn build(vs: &nn::VarStore, h: &Hyper, lr: f64) -> Result<nn::Optimizer, String> {
    use tch::nn::OptimizerConfig;
    let wd = h.weight_decay;
    let r = match h.optimizer {
        OptimizerKind::Sgd => {
            // libtorch rejects Nesterov without momentum; without momentum it is plain SGD.
            let nesterov = h.nesterov && h.momentum > 0.0;
            nn::sgd(h.momentum, 0.0, wd, nesterov).build(vs, lr)
        }
        // Adam's weight decay is L2 added to the gradient, AdamW's is decoupled: as in PyTorch.
        OptimizerKind::Adam => nn::adam(0.9, 0.999, wd).build(vs, lr),
        OptimizerKind::Adamw => nn::adamw(0.9, 0.999, wd).build(vs, lr),
        OptimizerKind::Rmsprop => nn::rms_prop(0.99, 1e-8, wd, h.momentum, false).build(vs, lr),
    };
    r.map_err(|e| format!("cannot build the {:?} optimizer: {e}", h.optimizer))
}
