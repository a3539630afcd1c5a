//! Development entry to the optimizer benchmark until `tune bench optimizers` is wired:
//! `cargo run --release --example bench_optimizers -- SEEDS PROBLEMS SAMPLERS Q TIMING`
//! (comma lists; `-` keeps the default).

use tune::bench::OptimizerBenchOptions;
use tune::sampler::SamplerKind;

fn main() -> anyhow::Result<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let mut o = OptimizerBenchOptions::default();
    let list = |i: usize| -> Option<Vec<String>> {
        a.get(i)
            .filter(|s| s.as_str() != "-")
            .map(|s| s.split(',').map(str::to_string).collect())
    };
    if let Some(s) = a.get(0).filter(|s| s.as_str() != "-") {
        o.seeds = s.parse()?;
    }
    if let Some(p) = list(1) {
        o.problems = p;
    }
    if let Some(s) = list(2) {
        o.samplers = s
            .iter()
            .map(|n| SamplerKind::parse(n).ok_or_else(|| anyhow::anyhow!("sampler {n}")))
            .collect::<Result<_, _>>()?;
    }
    if let Some(q) = list(3) {
        o.q = q.iter().map(|x| x.parse()).collect::<Result<_, _>>()?;
    }
    if let Some(t) = list(4) {
        o.timing_at = t
            .iter()
            .filter(|x| !x.is_empty() && x.as_str() != "none")
            .map(|x| x.parse())
            .collect::<Result<_, _>>()?;
    }
    tune::bench::run_optimizers(&o)
}
