//! Scrambled Sobol quasi-random search: covers the space far more evenly than random draws,
//! which is what an initial design wants.

use super::{AskContext, Sampler, is_duplicate, mix};
use crate::space::Params;

/// Owen-scrambled Sobol points (`sobol_burley`), seeded by the study seed. The point index is
/// the trial number, so parallel and resumed studies get the same, evenly spread sequence.
pub struct SobolSampler;

/// The point of the scrambled Sobol sequence at `index`, with `dims` coordinates.
pub fn sobol_point(index: u64, dims: usize, seed: u64) -> Vec<f64> {
    let scramble = (mix(seed, 0x0005_0B01) & 0xFFFF_FFFF) as u32;
    (0..dims)
        .map(|d| {
            // sobol_burley supports 256 dimensions and 2^16 points (it asserts both); beyond,
            // fall back to a hashed coordinate, and wrap the index.
            if d < sobol_burley::NUM_DIMENSIONS as usize {
                let i = (index & 0xFFFF) as u32;
                f64::from(sobol_burley::sample(i, d as u32, scramble))
            } else {
                (mix(seed ^ d as u64, index) >> 11) as f64 / (1u64 << 53) as f64
            }
        })
        .collect()
}

impl Sampler for SobolSampler {
    fn ask(&mut self, ctx: &AskContext<'_>) -> Params {
        let dims = ctx.space.len();
        let mut index = ctx.trial_number.0;
        let mut p = ctx.space.from_unit(&sobol_point(index, dims, ctx.seed));
        // Rounding in discrete spaces can map two Sobol points onto one configuration: move on
        // along the sequence (bounded) rather than run the same configuration twice.
        for k in 1..64u64 {
            if !is_duplicate(&p, ctx) {
                break;
            }
            index = index.wrapping_add(k * 7919 + 1_000_003);
            p = ctx.space.from_unit(&sobol_point(index, dims, ctx.seed));
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sobol_points_fill_the_cube_evenly() {
        // In 1-d the first 2^k scrambled Sobol points put exactly one point in each cell of
        // width 2^-k.
        let mut cells = [0; 16];
        for i in 0..16 {
            let x = sobol_point(i, 2, 7)[0];
            cells[(x * 16.0) as usize] += 1;
        }
        assert_eq!(cells, [1; 16]);
    }

    #[test]
    fn the_same_seed_gives_the_same_points() {
        assert_eq!(sobol_point(5, 3, 11), sobol_point(5, 3, 11));
        assert_ne!(sobol_point(5, 3, 11), sobol_point(5, 3, 12));
    }
}
