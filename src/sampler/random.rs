//! Uniform random search: the baseline every other sampler is scored against.

use rand::Rng;

use super::{AskContext, Sampler, is_duplicate};
use crate::space::Params;

/// Independent uniform draws in the unit cube (so log scales are log-uniform).
pub struct RandomSampler;

impl Sampler for RandomSampler {
    fn ask(&mut self, ctx: &AskContext<'_>) -> Params {
        let mut rng = ctx.rng();
        let mut last = Params::new();
        // In a small discrete space a uniform draw often repeats a configuration; a few redraws
        // avoid wasting budget without ever looping forever.
        for _ in 0..32 {
            let u: Vec<f64> = (0..ctx.space.len()).map(|_| rng.random::<f64>()).collect();
            last = ctx.space.from_unit(&u);
            if !is_duplicate(&last, ctx) {
                break;
            }
        }
        last
    }
}
