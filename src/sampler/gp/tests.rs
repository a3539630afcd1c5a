use rand::Rng;
use rand_distr::StandardNormal;

use super::kernel::Layout;
use super::model::{Modelled, Warp, model_rung, observations, quantile};
use super::*;
use crate::sampler::{SamplerKind, SamplerOptions, build_with, is_duplicate};
use crate::space::ParamValue;
use crate::trial::{Direction, FinishedTrial, Outcome, TrialNumber};

fn space(src: &str) -> Space {
    let t: toml::Table = toml::from_str(src).expect("toml");
    Space::from_toml(&t).expect("space")
}

const MIXED: &str = r#"
lr           = { type = "float", low = 1e-5, high = 1.0, log = true }
optimizer    = { type = "categorical", choices = ["sgd", "adam", "adamw"] }
momentum     = { type = "float", low = 0.0, high = 0.99, when = { optimizer = "sgd" } }
batch_size   = { type = "int", low = 16, high = 1024, log = true }
accumulation = { type = "int", low = 1, high = 8 }
wd           = { type = "float", low = 0.0, high = 0.1, step = 0.01 }
"#;

fn mixed_loss(p: &Params) -> f64 {
    let lr = p["lr"].as_f64().unwrap_or(1.0).log10();
    let opt = match &p["optimizer"] {
        ParamValue::Str(s) if s == "sgd" => 0.0,
        ParamValue::Str(s) if s == "adam" => 0.3,
        _ => 0.1,
    };
    let m = p.get("momentum").and_then(|v| v.as_f64()).unwrap_or(0.0);
    let b = p["batch_size"].as_f64().unwrap_or(1.0).log2();
    (lr + 2.0).powi(2) + opt + (m - 0.9).powi(2) + 0.01 * (b - 8.0).powi(2)
}

/// The context of a minimised single-objective ask.
fn ask_ctx<'a>(
    s: &'a Space,
    history: &'a [FinishedTrial],
    pending: &'a [Params],
    n: u64,
    seed: u64,
) -> AskContext<'a> {
    AskContext {
        others: &[],
        space: s,
        direction: Direction::Minimize,
        history,
        pending,
        trial_number: TrialNumber(n),
        seed,
    }
}

/// Runs a sampler on `f` for `n` trials, `q` outstanding at once, returning the history.
fn run(
    s: &Space,
    kind: SamplerKind,
    n: usize,
    q: usize,
    seed: u64,
    f: &dyn Fn(&Params) -> Option<f64>,
) -> Vec<FinishedTrial> {
    let mut sampler = build_with(
        kind,
        &SamplerOptions {
            n_startup: Some(4),
            cost_aware: None,
        },
    );
    let mut history: Vec<FinishedTrial> = Vec::new();
    let mut pending: Vec<(u64, Params)> = Vec::new();
    let mut asked = 0u64;
    while history.len() < n {
        while pending.len() < q && (asked as usize) < n {
            let pp: Vec<Params> = pending.iter().map(|p| p.1.clone()).collect();
            let ctx = ask_ctx(s, &history, &pp, asked, seed);
            let p = sampler.ask(&ctx);
            s.validate(&p).expect("proposal is valid");
            assert!(!is_duplicate(&p, &ctx), "duplicate proposal {p:?}");
            pending.push((asked, p));
            asked += 1;
        }
        let (num, p) = pending.remove(0);
        let outcome = match f(&p) {
            Some(v) => Outcome::Complete { value: v },
            None => Outcome::Failed,
        };
        history.push(finished(num, p, outcome));
    }
    history
}

#[test]
fn proposals_are_valid_and_inactive_params_absent_in_a_mixed_space() {
    let s = space(MIXED);
    let h = run(&s, SamplerKind::Gp, 14, 1, 3, &|p| Some(mixed_loss(p)));
    for t in &h {
        let sgd = t.params["optimizer"] == ParamValue::Str("sgd".into());
        assert_eq!(t.params.contains_key("momentum"), sgd);
    }
}

#[test]
fn the_same_seed_gives_the_same_proposals() {
    let s = space(MIXED);
    let a = run(&s, SamplerKind::Gp, 9, 2, 11, &|p| Some(mixed_loss(p)));
    let b = run(&s, SamplerKind::Gp, 9, 2, 11, &|p| Some(mixed_loss(p)));
    let pa: Vec<_> = a.iter().map(|t| &t.params).collect();
    let pb: Vec<_> = b.iter().map(|t| &t.params).collect();
    assert_eq!(pa, pb);
}

#[test]
fn the_gp_finds_a_one_dimensional_minimum_in_few_trials() {
    let s = space("x = { type = \"float\", low = -2.0, high = 3.0 }");
    let f = |p: &Params| {
        let x = p["x"].as_f64().unwrap_or(0.0);
        Some((x - 0.7).powi(2) + 0.1 * (5.0 * x).sin())
    };
    // The minimum of (x-0.7)^2 + 0.1 sin(5x) on [-2, 3] is near x = 0.89.
    let grid_min = (0..=50_000)
        .map(|i| -2.0 + 5.0 * i as f64 / 50_000.0)
        .map(|x| (x - 0.7f64).powi(2) + 0.1 * (5.0 * x).sin())
        .fold(f64::INFINITY, f64::min);
    let h = run(&s, SamplerKind::Gp, 14, 1, 5, &f);
    let best = h
        .iter()
        .filter_map(|t| t.value())
        .fold(f64::INFINITY, f64::min);
    assert!(best - grid_min < 1e-3, "best {best}, min {grid_min}");
}

#[test]
fn pending_trials_are_not_proposed_again_in_a_small_discrete_space() {
    let s = space(
        "a = { type = \"int\", low = 0, high = 2 }\n\
         b = { type = \"categorical\", choices = [\"x\", \"y\"] }",
    );
    // 6 configurations, 6 trials, 3 at a time: every one must be new.
    let h = run(&s, SamplerKind::Gp, 6, 3, 1, &|p| {
        Some(p["a"].as_f64().unwrap_or(0.0))
    });
    for i in 0..h.len() {
        for j in 0..i {
            assert_ne!(h[i].params, h[j].params);
        }
    }
}

#[test]
fn failures_huge_values_and_constant_outputs_never_panic() {
    let s = space(MIXED);
    // Every third trial fails, the others are huge or constant.
    let cnt = std::cell::Cell::new(0);
    let h = run(&s, SamplerKind::Gp, 12, 2, 2, &|_p| {
        let c = cnt.get();
        cnt.set(c + 1);
        match c % 3 {
            0 => None,
            1 => Some(1e300),
            _ => Some(1.0),
        }
    });
    assert_eq!(h.len(), 12);
    let h = run(&s, SamplerKind::Gp, 8, 1, 2, &|_| Some(3.0));
    assert_eq!(h.len(), 8);
    let h = run(&s, SamplerKind::Gp, 8, 1, 2, &|_| Some(f64::NAN));
    assert_eq!(h.len(), 8);
}

#[test]
fn tpe_and_auto_give_valid_distinct_proposals() {
    let s = space(MIXED);
    for kind in [SamplerKind::Tpe, SamplerKind::Auto] {
        let h = run(&s, kind, 14, 2, 4, &|p| Some(mixed_loss(p)));
        assert_eq!(h.len(), 14);
    }
}

#[test]
fn the_warp_keeps_order_and_tames_huge_losses() {
    let ys = [0.5, 1.0, 2.0, 3.0, 1e6, 4.0, 2.5];
    let w = Warp::fit(&ys, &GpPolicy::default());
    let zs: Vec<f64> = ys.iter().map(|&y| w.apply(y)).collect();
    for i in 0..ys.len() {
        for j in 0..ys.len() {
            if ys[i] < ys[j] {
                assert!(zs[i] < zs[j]);
            }
        }
    }
    assert!(zs.iter().all(|z| z.is_finite() && z.abs() < 5.0), "{zs:?}");
    // Zero, the model's prior mean, sits at a high quantile of the losses.
    let mut sorted = zs.clone();
    sorted.sort_by(f64::total_cmp);
    assert!(
        quantile(&sorted, GpPolicy::default().prior_mean_q).abs() < 1e-9,
        "{sorted:?}"
    );
    assert!(zs.iter().filter(|&&z| z < 0.0).count() >= 5, "{zs:?}");
}

#[test]
fn a_small_discrete_space_is_used_up_without_a_repeat() {
    let s = space(
        "a = { type = \"int\", low = 0, high = 3 }\n\
         b = { type = \"categorical\", choices = [\"x\", \"y\", \"z\"] }",
    );
    // 12 configurations, 12 trials: the last ones can only be found by looking for them.
    for kind in [SamplerKind::Gp, SamplerKind::Tpe] {
        let h = run(&s, kind, 12, 2, 9, &|p| {
            Some(p["a"].as_f64().unwrap_or(0.0))
        });
        assert_eq!(h.len(), 12);
    }
}

/// A finished trial with no other objectives, no curve and no known duration.
fn finished(n: u64, params: Params, outcome: Outcome) -> FinishedTrial {
    FinishedTrial {
        others: Vec::new(),
        number: TrialNumber(n),
        params,
        outcome,
        curve: Vec::new(),
        seconds: None,
    }
}

/// The next ask of a default GP sampler built afresh on `history` (minimised, nothing pending),
/// as a resumed study's first ask.
fn fresh_ask(s: &Space, history: &[FinishedTrial], seed: u64) -> Params {
    fresh_ask_pending(s, history, &[], seed)
}

/// As [`fresh_ask`], with `pending` asks outstanding.
fn fresh_ask_pending(
    s: &Space,
    history: &[FinishedTrial],
    pending: &[Params],
    seed: u64,
) -> Params {
    let n = (history.len() + pending.len()) as u64;
    GpSampler::default().ask(&ask_ctx(s, history, pending, n, seed))
}

fn trial(n: u64, x: f64, outcome: Outcome) -> FinishedTrial {
    let mut params = Params::new();
    params.insert("x".into(), ParamValue::Float(x));
    finished(n, params, outcome)
}

#[test]
fn failed_trials_count_as_the_worst_and_pruned_ones_no_better_than_the_median() {
    let s = space("x = { type = \"float\", low = 0.0, high = 1.0 }");
    let history = vec![
        trial(0, 0.1, Outcome::Complete { value: 1.0 }),
        trial(1, 0.2, Outcome::Complete { value: 2.0 }),
        trial(2, 0.3, Outcome::Complete { value: 3.0 }),
        trial(3, 0.4, Outcome::Failed),
        // A pruned trial whose partial value looks like the best: it must not become one.
        trial(
            4,
            0.5,
            Outcome::Pruned {
                value: Some(-10.0),
                step: Some(3),
            },
        ),
        trial(
            5,
            0.6,
            Outcome::Complete {
                value: f64::INFINITY,
            },
        ),
    ];
    let ctx = ask_ctx(&s, &history, &[], 6, 0);
    let obs = observations(
        &GpPolicy::default(),
        &ctx,
        &Layout::new(&s),
        Modelled::Single,
    )
    .expect("two complete trials are enough");
    let worst = obs[..3]
        .iter()
        .map(|o| o.z)
        .fold(f64::NEG_INFINITY, f64::max);
    assert_eq!(obs[3].z, worst);
    assert!(!obs[3].complete && !obs[4].complete && !obs[5].complete);
    assert!(obs[4].z >= obs[1].z, "pruned at least the median");
    assert_eq!(obs[5].z, worst, "a diverged value is a failure");
    // And the sampler proposes something valid from this history.
    let mut g = GpSampler::new(GpOptions {
        n_startup: Some(2),
        ..GpOptions::default()
    });
    s.validate(&g.ask(&ctx)).expect("valid");
}

#[test]
fn maximisation_is_turned_into_minimisation() {
    let s = space("x = { type = \"float\", low = 0.0, high = 1.0 }");
    let history: Vec<FinishedTrial> = (0..6)
        .map(|i| {
            let x = i as f64 / 5.0;
            trial(i, x, Outcome::Complete { value: x })
        })
        .collect();
    let ctx = AskContext {
        others: &[],
        space: &s,
        direction: Direction::Maximize,
        history: &history,
        pending: &[],
        trial_number: TrialNumber(6),
        seed: 1,
    };
    let mut g = GpSampler::new(GpOptions {
        n_startup: Some(2),
        ..GpOptions::default()
    });
    let x = g.ask(&ctx)["x"].as_f64().expect("float");
    assert!(x > 0.7, "value grows with x, so look high: {x}");
}

#[test]
fn auto_is_the_gp_in_ordinary_spaces_and_tpe_in_very_wide_ones() {
    let s = space(MIXED);
    let a = run(&s, SamplerKind::Auto, 8, 1, 6, &|p| Some(mixed_loss(p)));
    let g = run(&s, SamplerKind::Gp, 8, 1, 6, &|p| Some(mixed_loss(p)));
    assert_eq!(
        a.iter().map(|t| &t.params).collect::<Vec<_>>(),
        g.iter().map(|t| &t.params).collect::<Vec<_>>()
    );
    let wide: String = (0..crate::sampler::AUTO_GP_MAX_PARAMS + 6)
        .map(|i| format!("x{i} = {{ type = \"float\", low = 0.0, high = 1.0 }}\n"))
        .collect();
    let s = space(&wide);
    let f = |p: &Params| Some(p.values().filter_map(ParamValue::as_f64).sum::<f64>());
    let a = run(&s, SamplerKind::Auto, 8, 1, 6, &f);
    let t = run(&s, SamplerKind::Tpe, 8, 1, 6, &f);
    assert_eq!(
        a.iter().map(|t| &t.params).collect::<Vec<_>>(),
        t.iter().map(|t| &t.params).collect::<Vec<_>>()
    );
}

/// A planted trap: degree 1 is broad at 0.30 and looks best early, degree 2 wins (0.15) in a
/// narrow valley of x, degree 3 is poor.
fn degree_trap(p: &Params) -> Option<f64> {
    let x = p["x"].as_f64()?;
    let y = p["y"].as_f64()?;
    Some(match p["degree"].as_f64()? as i64 {
        1 => 0.30 + 0.05 * ((x - 0.7).powi(2) + (y - 0.5).powi(2)),
        2 => 0.15 + 4.0 * ((x - 0.3).powi(2) + (y - 0.2).powi(2)),
        _ => 0.25 + 5.0 * ((x - 0.4).powi(2) + (y - 0.3).powi(2)),
    })
}

const TRAP: &str = "degree = { type = \"int\", low = 1, high = 3 }\n\
                    x = { type = \"float\", low = 0.0, high = 1.0 }\n\
                    y = { type = \"float\", low = 0.0, high = 1.0 }";

#[test]
fn on_a_planted_degree_trap_every_degree_is_tried_its_floor_and_the_trap_is_left() {
    let s = space(TRAP);
    for (q, seed) in [(1, 0), (1, 1), (4, 2)] {
        let h = run(&s, SamplerKind::Gp, 50, q, seed, &degree_trap);
        let tried = |d: i64| {
            h.iter()
                .filter(|t| t.params["degree"] == ParamValue::Int(d))
                .count()
        };
        for d in [2, 3] {
            assert!(
                tried(d) >= discrete::FLOOR_CAP,
                "q={q} seed={seed}: degree {d} tried {} times",
                tried(d)
            );
        }
        let best = h
            .iter()
            .filter_map(|t| t.value())
            .fold(f64::INFINITY, f64::min);
        assert!(best < 0.2, "q={q} seed={seed}: stuck at {best}");
    }
}

/// A complete trial of the planted degree trap at (`degree`, `x`, `y`).
fn trap_trial(n: u64, degree: i64, x: f64, y: f64) -> FinishedTrial {
    let mut p = Params::new();
    p.insert("degree".into(), ParamValue::Int(degree));
    p.insert("x".into(), ParamValue::Float(x));
    p.insert("y".into(), ParamValue::Float(y));
    let v = degree_trap(&p).expect("complete params");
    finished(n, p, Outcome::Complete { value: v })
}

/// Eight degree-1 trials spread over the square, degree-2 trials at `two`, then three degree-3
/// trials along y = 0.8.
fn trap_history(two: &[(f64, f64)]) -> Vec<FinishedTrial> {
    let mut h: Vec<FinishedTrial> = (0..8)
        .map(|i| trap_trial(i, 1, (i as f64 + 0.5) / 8.0, 0.1 + 0.1 * i as f64))
        .collect();
    for &(x, y) in two {
        h.push(trap_trial(h.len() as u64, 2, x, y));
    }
    let n = h.len() as u64;
    h.extend((0..3).map(|i| trap_trial(n + i, 3, 0.2 + 0.3 * i as f64, 0.8)));
    h
}

#[test]
fn pending_asks_spread_over_starved_values() {
    // Eight degree-1 trials finished, three asks pending at once: the floor owes degrees 2 and
    // 3 two trials each, and pending asks count, so the three asks do not all take one value.
    let s = space(TRAP);
    let history: Vec<FinishedTrial> = (0..8)
        .map(|i| trap_trial(i, 1, i as f64 / 8.0, 0.5))
        .collect();
    let mut g = GpSampler::new(GpOptions {
        n_startup: Some(2),
        ..GpOptions::default()
    });
    let mut pending: Vec<Params> = Vec::new();
    for k in 0..3 {
        let ctx = ask_ctx(&s, &history, &pending, 8 + k, 4);
        pending.push(g.ask(&ctx));
    }
    let degrees: Vec<&ParamValue> = pending.iter().map(|p| &p["degree"]).collect();
    assert!(degrees.contains(&&ParamValue::Int(2)), "{degrees:?}");
    assert!(degrees.contains(&&ParamValue::Int(3)), "{degrees:?}");
}

#[test]
fn a_starved_value_s_model_guided_ask_searches_near_that_value_s_best_trial() {
    // Eight degree-1 trials, one degree-2 trial in the middle of the square, three degree-3
    // trials: the floor owes degree 2 the next ask, and its count (1) gives that ask to the
    // acquisition with degree 2 held. The model has seen degree 2 once, so it is most unsure at
    // the square's corners, where unbounded log EI would send the ask; it stays within
    // `GpPolicy::held_radius` of degree 2's one trial instead.
    let s = space(TRAP);
    let history = trap_history(&[(0.55, 0.5)]);
    for seed in 0..6 {
        let mut g = GpSampler::new(GpOptions {
            n_startup: Some(2),
            ..GpOptions::default()
        });
        let ctx = ask_ctx(&s, &history, &[], 12, seed);
        let p = g.ask(&ctx);
        assert_eq!(p["degree"], ParamValue::Int(2), "seed {seed}: {p:?}");
        let (x, y) = (p["x"].as_f64().unwrap(), p["y"].as_f64().unwrap());
        let held_radius = GpPolicy::default().held_radius;
        assert!(
            (x - 0.55).abs() <= held_radius + 1e-9 && (y - 0.5).abs() <= held_radius + 1e-9,
            "seed {seed}: {p:?} is outside the box around degree 2's trial"
        );
    }
}

#[test]
fn a_starved_value_s_model_guided_ask_follows_that_value_s_own_trials() {
    // Degree 2 (its valley at (0.3, 0.2)) has three trials, the best at (0.67, 0.48), all
    // worse than degree 1's plateau (0.30): the floor owes it the next ask and gives it to the
    // acquisition, in the box around that best trial. Measured from the incumbent, improvement
    // for degree 2 is a long shot the model can only place where it is most unsure: the box's
    // edge (x = 0.92, where degree 2 scores 1.7). Measured from degree 2's own best, the ask
    // follows the slope its trials show, towards the valley.
    let s = space(TRAP);
    let history = trap_history(&[(0.744, 0.524), (0.258, 0.830), (0.673, 0.482)]);
    for seed in 0..4 {
        let p = fresh_ask(&s, &history, seed);
        assert_eq!(p["degree"], ParamValue::Int(2), "seed {seed}: {p:?}");
        let v = degree_trap(&p).expect("complete params");
        assert!(v < 0.3, "seed {seed}: {p:?} scores {v}");
    }
}

/// A planted pair trap (two categoricals, as a random forest's criterion x bootstrap): gini with
/// bootstrap is broad at 0.30; entropy without bootstrap wins (0.17) in a narrow valley of
/// (x, y); log_loss without bootstrap is close (0.20); the rest are poor.
fn pair_trap(p: &Params) -> f64 {
    let (x, y) = (p["x"].as_f64().unwrap(), p["y"].as_f64().unwrap());
    let bowl = |a: f64, c: f64, cx: f64, cy: f64| a + c * ((x - cx).powi(2) + (y - cy).powi(2));
    let boot = p["bootstrap"] == ParamValue::Bool(true);
    match (&p["criterion"], boot) {
        (ParamValue::Str(c), true) if c == "gini" => bowl(0.30, 0.06, 0.5, 0.5),
        (ParamValue::Str(c), false) if c == "gini" => bowl(0.27, 1.5, 0.4, 0.2),
        (ParamValue::Str(c), true) if c == "entropy" => bowl(0.26, 1.5, 0.6, 0.6),
        (ParamValue::Str(c), false) if c == "entropy" => bowl(0.17, 2.5, 0.3, 0.4),
        (_, true) => bowl(0.28, 1.5, 0.6, 0.6),
        (_, false) => bowl(0.20, 2.5, 0.3, 0.4),
    }
}

#[test]
fn a_pair_of_categoricals_gets_its_never_run_combination_though_each_value_had_its_share() {
    // 36 trials: each criterion 12 times, with bootstrap 24 times and without 12, spread over
    // the square, the best (log_loss without bootstrap) last; but (entropy, no bootstrap), the
    // winner, never ran. Every value has its share, so only the floor on combinations owes it
    // the next asks: the first a space-filling point, the next (with the first pending) the
    // acquisition's, both holding the combination.
    let s = space(
        "criterion = { type = \"categorical\", choices = [\"gini\", \"entropy\", \"log_loss\"] }\n\
         bootstrap = { type = \"categorical\", choices = [true, false] }\n\
         x = { type = \"float\", low = 0.0, high = 1.0 }\n\
         y = { type = \"float\", low = 0.0, high = 1.0 }",
    );
    let mut history: Vec<FinishedTrial> = Vec::new();
    for (crit, boot, n) in [
        ("gini", true, 6),
        ("entropy", true, 12),
        ("gini", false, 6),
        ("log_loss", true, 6),
        ("log_loss", false, 6),
    ] {
        for k in 0..n {
            let mut p = Params::new();
            p.insert("criterion".into(), ParamValue::Str(crit.into()));
            p.insert("bootstrap".into(), ParamValue::Bool(boot));
            // Spread over the square, nearing (0.35, 0.45) at the end of each block.
            let t = 1.0 - (k as f64 + 1.0) / n as f64;
            p.insert(
                "x".into(),
                ParamValue::Float(0.35 + 0.6 * t * ((k % 3) as f64 - 1.0)),
            );
            p.insert(
                "y".into(),
                ParamValue::Float(0.45 + 0.5 * t * ((k % 2) as f64 - 0.5)),
            );
            let v = pair_trap(&p);
            history.push(finished(
                history.len() as u64,
                p,
                Outcome::Complete { value: v },
            ));
        }
    }
    let winner = |p: &Params| {
        p["criterion"] == ParamValue::Str("entropy".into())
            && p["bootstrap"] == ParamValue::Bool(false)
    };
    assert!(!history.iter().any(|t| winner(&t.params)));
    for seed in 0..4 {
        let first = fresh_ask(&s, &history, seed);
        assert!(winner(&first), "seed {seed}: {first:?}");
        let second = fresh_ask_pending(&s, &history, std::slice::from_ref(&first), seed);
        assert!(winner(&second), "seed {seed}: {second:?}");
    }
}

/// Runs the GP with the given options on `f` sequentially (`None`: the trial failed),
/// returning the history; no trial's duration is known.
fn run_gp(
    s: &Space,
    g: GpSampler,
    n: usize,
    seed: u64,
    f: &dyn Fn(&Params) -> Option<f64>,
) -> Vec<FinishedTrial> {
    run_gp_timed(s, g, n, seed, f, &|_| None)
}

#[test]
fn a_learned_failure_boundary_keeps_the_search_on_the_side_that_runs() {
    // Most of the square fails (y > 0.3: an out-of-memory region), the loss is smallest at
    // (0.8, 0.25), inside the small region that runs.
    let s = space(
        "x = { type = \"float\", low = 0.0, high = 1.0 }\n\
         y = { type = \"float\", low = 0.0, high = 1.0 }",
    );
    let f = |p: &Params| {
        let (x, y) = (p["x"].as_f64()?, p["y"].as_f64()?);
        (y <= 0.3).then(|| (x - 0.8).powi(2) + (y - 0.25).powi(2))
    };
    let mut fails = [0usize; 2];
    let mut best = [0.0f64; 2];
    for (k, learn) in [false, true].into_iter().enumerate() {
        for seed in 0..12 {
            let g = GpSampler::with_policy(
                GpOptions {
                    n_startup: Some(6),
                    ..GpOptions::default()
                },
                GpPolicy {
                    learn_failures: learn,
                    ..GpPolicy::default()
                },
            );
            let h = run_gp(&s, g, 30, seed, &f);
            fails[k] += h[10..].iter().filter(|t| t.value().is_none()).count();
            best[k] += h
                .iter()
                .filter_map(|t| t.value())
                .fold(f64::INFINITY, f64::min);
        }
    }
    eprintln!(
        "failures after trial 10 and summed best, without / with the classifier: {fails:?} {best:?}"
    );
    // Measured: 26 failures without, 9 with; summed best 4.6e-5 without, 3.2e-5 with. (Before
    // the fit's extra start with the noise high, `GpPolicy::noisy_start_log_sn2`: 92 and 7; the penalty
    // alone fails far less since, the classifier a little more.)
    assert!(2 * fails[1] <= fails[0], "{fails:?}");
    assert!(best[1] <= 1.5 * best[0], "{best:?}");
}

#[test]
fn without_a_failure_the_classifier_changes_no_proposal() {
    let s = space(
        "x = { type = \"float\", low = 0.0, high = 1.0 }\n\
         k = { type = \"int\", low = 1, high = 3 }",
    );
    let f = |p: &Params| Some((p["x"].as_f64()? - 0.3).powi(2) + p["k"].as_f64()?);
    let run = |learn| {
        let g = GpSampler::with_policy(
            GpOptions {
                n_startup: Some(4),
                ..GpOptions::default()
            },
            GpPolicy {
                learn_failures: learn,
                ..GpPolicy::default()
            },
        );
        run_gp(&s, g, 12, 7, &f)
            .into_iter()
            .map(|t| t.params)
            .collect::<Vec<_>>()
    };
    assert_eq!(run(true), run(false));
}

/// Runs the GP for `n` trials on `f` (`None`: the trial failed), each complete trial told with
/// the simulated duration `dur(params)` (`None`: no duration known).
fn run_gp_timed(
    s: &Space,
    mut g: GpSampler,
    n: usize,
    seed: u64,
    f: &dyn Fn(&Params) -> Option<f64>,
    dur: &dyn Fn(&Params) -> Option<f64>,
) -> Vec<FinishedTrial> {
    let mut history: Vec<FinishedTrial> = Vec::new();
    for k in 0..n as u64 {
        let ctx = ask_ctx(s, &history, &[], k, seed);
        let p = g.ask(&ctx);
        let (outcome, seconds) = match f(&p) {
            Some(value) => (Outcome::Complete { value }, dur(&p)),
            None => (Outcome::Failed, None),
        };
        history.push(FinishedTrial {
            others: Vec::new(),
            number: TrialNumber(k),
            params: p,
            outcome,
            curve: Vec::new(),
            seconds,
        });
    }
    history
}

/// The best value among the trials that ended within `budget` simulated seconds.
fn best_within(h: &[FinishedTrial], budget: f64) -> f64 {
    let mut spent = 0.0;
    let mut best = f64::INFINITY;
    for t in h {
        spent += t.seconds.unwrap_or(0.0);
        if spent > budget {
            break;
        }
        best = best.min(t.value().unwrap_or(f64::INFINITY));
    }
    best
}

#[test]
fn with_the_cost_term_a_slow_half_is_bought_only_when_it_pays() {
    // Durations grow 20-fold along x; the loss is a little better on the slow side (the best
    // at x = 0.8 is 0.032 below the best at x = 0).
    let s = space(
        "x = { type = \"float\", low = 0.0, high = 1.0 }\n\
         y = { type = \"float\", low = 0.0, high = 1.0 }",
    );
    let f = |p: &Params| {
        let (x, y) = (
            p["x"].as_f64().unwrap_or(0.0),
            p["y"].as_f64().unwrap_or(0.0),
        );
        Some((y - 0.4).powi(2) + 0.05 * (x - 0.8).powi(2))
    };
    let dur = |p: &Params| Some(20f64.powf(p["x"].as_f64().unwrap_or(0.0)));
    let (mut spent, mut best) = ([0.0f64; 2], [0.0f64; 2]);
    for seed in 0..8 {
        let opts = |on| {
            GpSampler::new(GpOptions {
                n_startup: Some(5),
                cost_aware: on,
            })
        };
        let plain = run_gp_timed(&s, opts(false), 20, seed, &f, &dur);
        let budget: f64 = plain.iter().filter_map(|t| t.seconds).sum();
        let aware = run_gp_timed(&s, opts(true), 20, seed, &f, &dur);
        spent[0] += budget;
        spent[1] += aware.iter().filter_map(|t| t.seconds).sum::<f64>();
        best[0] += best_within(&plain, budget);
        best[1] += best_within(&aware, budget);
    }
    eprintln!(
        "simulated seconds of 20 trials and summed best at plain's time, plain / aware: {spent:?} {best:?}"
    );
    // Measured: 1568 s against 1411 s for 20 trials, summed best 3.0e-5 against 1.4e-5.
    assert!(spent[1] < spent[0], "{spent:?}");
    assert!(best[1] <= best[0] * 1.05, "{best:?}");
}

#[test]
fn without_durations_that_vary_the_cost_term_changes_no_proposal() {
    let s = space(
        "x = { type = \"float\", low = 0.0, high = 1.0 }\n\
         k = { type = \"int\", low = 1, high = 3 }",
    );
    let f = |p: &Params| {
        Some((p["x"].as_f64().unwrap_or(0.0) - 0.3).powi(2) + p["k"].as_f64().unwrap_or(0.0))
    };
    let run = |on, dur: &dyn Fn(&Params) -> Option<f64>| {
        let g = GpSampler::new(GpOptions {
            n_startup: Some(4),
            cost_aware: on,
        });
        run_gp_timed(&s, g, 12, 7, &f, dur)
            .into_iter()
            .map(|t| t.params)
            .collect::<Vec<_>>()
    };
    let off = run(false, &|_| None);
    assert_eq!(run(true, &|_| None), off);
    // Durations that vary less than 1.5-fold are ignored too.
    assert_eq!(
        run(true, &|p: &Params| Some(
            10.0 + p["x"].as_f64().unwrap_or(0.0)
        )),
        off
    );
}

/// Runs `sampler` for `n` trials on a two-objective problem (both minimised), `q` asks
/// outstanding; returns the hypervolume of the complete trials against `reference`.
fn two_objective_hv(
    sampler: &mut dyn Sampler,
    s: &Space,
    f: &dyn Fn(&Params) -> [f64; 2],
    n: u64,
    q: usize,
    seed: u64,
    reference: &[f64],
) -> f64 {
    let others = [Direction::Minimize];
    let mut history: Vec<FinishedTrial> = Vec::new();
    let mut pending: Vec<(u64, Params)> = Vec::new();
    let mut next = 0;
    while (history.len() as u64) < n {
        while pending.len() < q && next < n {
            let queued: Vec<Params> = pending.iter().map(|(_, p)| p.clone()).collect();
            let p = sampler.ask(&AskContext {
                others: &others,
                space: s,
                direction: Direction::Minimize,
                history: &history,
                pending: &queued,
                trial_number: TrialNumber(next),
                seed,
            });
            s.validate(&p).expect("valid proposal");
            assert!(!queued.contains(&p), "a pending trial proposed again");
            pending.push((next, p));
            next += 1;
        }
        let (k, p) = pending.remove(0);
        let v = f(&p);
        history.push(FinishedTrial {
            others: vec![v[1]],
            number: TrialNumber(k),
            params: p,
            outcome: Outcome::Complete { value: v[0] },
            curve: Vec::new(),
            seconds: None,
        });
    }
    let pts: Vec<Vec<f64>> = history
        .iter()
        .map(|t| t.values().expect("complete"))
        .collect();
    crate::sampler::multi::pareto::hypervolume(&pts, reference)
}

#[test]
fn with_two_objectives_the_gp_nears_the_true_front_and_beats_random_search() {
    // A trade-off with a hidden, narrow good region: x picks a point on the front, y must sit
    // near 0.7 for either objective to be good (both worsen fast away from it).
    let s = space(
        r#"
x = { type = "float", low = 0.0, high = 1.0 }
y = { type = "float", low = 0.0, high = 1.0 }
z = { type = "float", low = 0.0, high = 1.0 }
"#,
    );
    let f = |p: &Params| {
        let x = p["x"].as_f64().unwrap();
        let y = p["y"].as_f64().unwrap();
        let z = p["z"].as_f64().unwrap();
        let g = 1.0 + 20.0 * (y - 0.7).powi(2) + 5.0 * (z - 0.2).powi(2);
        [g * x, g * (1.0 - x.sqrt())]
    };
    let reference = [2.0, 2.0];
    let (mut ehvi, mut parego, mut random) = (0.0, 0.0, 0.0);
    for seed in 0..3 {
        for q in [1, 3] {
            let mut g = GpSampler::default();
            ehvi += two_objective_hv(&mut g, &s, &f, 30, q, seed, &reference);
            let mut g = GpSampler::with_policy(
                GpOptions::default(),
                GpPolicy {
                    ehvi: false,
                    ..GpPolicy::default()
                },
            );
            parego += two_objective_hv(&mut g, &s, &f, 30, q, seed, &reference);
            random += two_objective_hv(&mut RandomSampler, &s, &f, 30, q, seed, &reference);
        }
    }
    // The true front f2 = 1 - sqrt(f1) leaves 4 - 1/3 of the reference's square dominated.
    // Six runs each (3 seeds, q = 1 and 3); measured: EHVI with ParEGO 21.36, ParEGO alone
    // 21.24, random 19.15.
    assert!(ehvi > 1.05 * random, "EHVI {ehvi} vs random {random}");
    assert!(ehvi > 0.99 * parego, "EHVI {ehvi} vs ParEGO alone {parego}");
    assert!(
        ehvi / 6.0 > 0.95 * (4.0 - 1.0 / 3.0),
        "EHVI mean {}",
        ehvi / 6.0
    );
}

#[test]
fn a_two_objective_study_with_failed_pruned_and_non_finite_trials_gets_valid_new_proposals() {
    // A mixed, conditional space; the second objective is maximised. Among the finished
    // trials: failures, pruned trials (with and without a last value), a trial whose second
    // value is NaN, and a constant first objective. Three asks stay pending throughout.
    let s = space(MIXED);
    let others = [Direction::Maximize];
    let mut history: Vec<FinishedTrial> = Vec::new();
    let mut pending: Vec<Params> = Vec::new();
    let mut g = GpSampler::default();
    for k in 0..24u64 {
        let p = g.ask(&AskContext {
            others: &others,
            space: &s,
            direction: Direction::Minimize,
            history: &history,
            pending: &pending,
            trial_number: TrialNumber(k),
            seed: 5,
        });
        s.validate(&p).expect("valid proposal");
        assert!(!pending.contains(&p), "trial {k} repeats a pending one");
        assert!(
            history.iter().all(|t| t.params != p),
            "trial {k} repeats a finished one"
        );
        pending.push(p);
        if pending.len() < 3 {
            continue;
        }
        let p = pending.remove(0);
        let n = history.len() as u64;
        let (outcome, others) = match n % 6 {
            0 if n > 0 => (Outcome::Failed, Vec::new()),
            1 => (
                Outcome::Pruned {
                    value: Some(mixed_loss(&p)),
                    step: Some(2),
                },
                Vec::new(),
            ),
            2 => (
                Outcome::Pruned {
                    value: None,
                    step: None,
                },
                Vec::new(),
            ),
            3 => (Outcome::Complete { value: 1.0 }, vec![f64::NAN]),
            _ => (
                Outcome::Complete {
                    value: if n < 12 { 1.0 } else { mixed_loss(&p) },
                },
                vec![-mixed_loss(&p) + p["lr"].as_f64().unwrap_or(0.0)],
            ),
        };
        history.push(FinishedTrial {
            others,
            number: TrialNumber(n),
            params: p,
            outcome,
            curve: Vec::new(),
            seconds: None,
        });
    }
    assert_eq!(history.len(), 22);
}

/// Branin (minimum 0.3979 at (-pi, 12.275), (pi, 2.275) and (9.42478, 2.475)).
fn branin(x0: f64, x1: f64) -> f64 {
    let pi = std::f64::consts::PI;
    (x1 - 5.1 / (4.0 * pi * pi) * x0 * x0 + 5.0 / pi * x0 - 6.0).powi(2)
        + 10.0 * (1.0 - 1.0 / (8.0 * pi)) * x0.cos()
        + 10.0
}

#[test]
fn every_fifth_ask_refines_the_incumbent_that_log_ei_has_left_behind() {
    // The first 35 trials of a branin run (tune-bench, seed 32): a regret of 0.0108 at trial 32
    // near (-pi, 12.275); without refining asks, log EI spent trials 33..49 on the other two
    // basins and ended there. Every fifth ask (`GpPolicy::exploit_every`) now minimises the posterior mean
    // within `GpPolicy::exploit_radius` of the incumbent: trials 39, 44 and 49 refine it, and the regret
    // after 50 trials is well below the one at 35.
    const PTS: &str = "\
        -1.7536848783493042 7.5803446769714355\n\
        8.451296091079712 4.774324893951416\n\
        3.8654106855392456 14.68248724937439\n\
        1.7227959632873535 0.11764883995056152\n\
        -4.289343357086182 6.356765627861023\n\
        -0.5478859155659723 6.303848352079387\n\
        -1.6651048964304445 9.964717883856645\n\
        -2.1385738806534063 13.06328238973273\n\
        7.332318650097257 0.0\n\
        -1.1381025634374584 11.464736360923323\n\
        -2.095744548867608 9.714770716095897\n\
        -2.478922296400658 9.76231211944538\n\
        -2.8342713485381883 10.491785009354174\n\
        -3.492854318613407 11.490320239284971\n\
        -2.8990903304019833 10.87222535412524\n\
        -2.8523487703598196 11.35852539306042\n\
        -2.928054829254261 11.777922714750437\n\
        -3.015380396016843 12.312106044149935\n\
        -2.9473989485729835 12.149849619302488\n\
        -3.3065657225211154 14.091802184214465\n\
        -3.0389677939360844 12.065839412625403\n\
        -3.1201836971724113 12.066791144759225\n\
        -3.092940646028152 11.954668208085176\n\
        -3.1807909005258717 12.277891948616164\n\
        -3.17766776968318 12.230358394288562\n\
        -3.2734747687139123 12.57768601610826\n\
        -3.1752726890471603 12.176849300139526\n\
        -3.1859937089011163 12.097868230206327\n\
        -3.160029832425725 12.5365949250961\n\
        -2.643204444853415 6.734196847697557\n\
        -4.098324386003991 14.393185414527446\n\
        -4.850281092228553 15.0\n\
        -3.158752813811386 12.413313701917458\n\
        -3.160276145288686 12.574094345204646\n\
        -4.544480829661159 11.945645283455166";
    let s = space(
        "x0 = { type = \"float\", low = -5.0, high = 10.0 }\n\
         x1 = { type = \"float\", low = 0.0, high = 15.0 }",
    );
    let history: Vec<FinishedTrial> = PTS
        .split_whitespace()
        .map(|v| v.parse::<f64>().expect("a number"))
        .collect::<Vec<f64>>()
        .chunks(2)
        .enumerate()
        .map(|(i, x)| {
            let mut p = Params::new();
            p.insert("x0".into(), ParamValue::Float(x[0]));
            p.insert("x1".into(), ParamValue::Float(x[1]));
            finished(
                i as u64,
                p,
                Outcome::Complete {
                    value: branin(x[0], x[1]),
                },
            )
        })
        .collect();
    assert_eq!(history.len(), 35);
    let (_, best) = history
        .iter()
        .map(|t| {
            (
                (
                    t.params["x0"].as_f64().unwrap(),
                    t.params["x1"].as_f64().unwrap(),
                ),
                t.value().unwrap(),
            )
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .expect("trials");
    assert!(
        best - 0.397_887 > 2e-4,
        "the incumbent's regret is {}",
        best - 0.397_887
    );
    let policy = GpPolicy::default();
    for seed in 0..3 {
        let mut h = history.clone();
        let mut g = GpSampler::default();
        for n in 35..50u64 {
            let p = g.ask(&ask_ctx(&s, &h, &[], n, seed));
            let (x0, x1) = (p["x0"].as_f64().unwrap(), p["x1"].as_f64().unwrap());
            if n % policy.exploit_every == policy.exploit_every - 1 {
                let inc = h
                    .iter()
                    .min_by(|a, b| a.value().unwrap().total_cmp(&b.value().unwrap()))
                    .expect("trials");
                let (i0, i1) = (
                    inc.params["x0"].as_f64().unwrap(),
                    inc.params["x1"].as_f64().unwrap(),
                );
                assert!(
                    (x0 - i0).abs() <= 15.0 * policy.exploit_radius + 1e-9
                        && (x1 - i1).abs() <= 15.0 * policy.exploit_radius + 1e-9,
                    "seed {seed}, trial {n}: {p:?} is not near the incumbent ({i0}, {i1})"
                );
            }
            h.push(finished(
                n,
                p,
                Outcome::Complete {
                    value: branin(x0, x1),
                },
            ));
        }
        let end = h
            .iter()
            .filter_map(|t| t.value())
            .fold(f64::INFINITY, f64::min);
        assert!(
            end - 0.397_887_357_729_739 < 0.7 * (best - 0.397_887_357_729_739),
            "seed {seed}: regret {} after 50 trials (was {})",
            end - 0.397_887_357_729_739,
            best - 0.397_887_357_729_739
        );
    }
}

#[test]
fn the_incumbent_at_the_box_s_edge_is_not_proposed_again_to_win_a_hair() {
    // The first 23 trials of a branin run (tune-bench, seed 55) that stuck at the edge x0 = 10
    // (value 1.943; the minimum nearby is 0.398 at x0 = 9.42): the model, sure of a slope
    // towards the edge, found its best expected improvement in re-running the incumbent a
    // hair away (x1 3.0061 -> 3.0069), and came back there 12 times in 35 trials. Once the
    // incumbent has a twin, improvement counts only beyond a margin (`GpPolicy::ei_margin`), so the
    // next ask goes somewhere new.
    let s = space(
        "x0 = { type = \"float\", low = -5.0, high = 10.0 }\n\
         x1 = { type = \"float\", low = 0.0, high = 15.0 }",
    );
    let pts: [(f64, f64); 23] = [
        (-1.7190450429916382, 4.536352157592773),
        (7.348573803901672, 10.296891331672668),
        (5.57458221912384, 2.9877912998199463),
        (0.787397027015686, 13.961495161056519),
        (2.550756335258484, 12.401368618011475),
        (0.267463977311559, 1.0159611121649268),
        (10.0, 3.6600690477283133),
        (10.0, 4.730454060992426),
        (10.0, 0.0),
        (10.0, 2.1442824401251666),
        (10.0, 2.952002634550776),
        (-5.0, 8.035017036402698),
        (8.69127729278792, 2.490317126586721),
        (-5.0, 0.0),
        (10.0, 15.0),
        (10.0, 2.9965969830190256),
        (-5.0, 15.0),
        (10.0, 3.0243494557861617),
        (3.6743734541026836, 6.941320452329574),
        (-5.0, 11.986208299140289),
        (10.0, 3.0090826327759586),
        (10.0, 7.4279854382904436),
        (10.0, 3.006141062789186),
    ];
    let history: Vec<FinishedTrial> = pts
        .iter()
        .enumerate()
        .map(|(i, &(x0, x1))| {
            let mut p = Params::new();
            p.insert("x0".into(), ParamValue::Float(x0));
            p.insert("x1".into(), ParamValue::Float(x1));
            finished(
                i as u64,
                p,
                Outcome::Complete {
                    value: branin(x0, x1),
                },
            )
        })
        .collect();
    let p = fresh_ask(&s, &history, 55);
    let (x0, x1) = (p["x0"].as_f64().unwrap(), p["x1"].as_f64().unwrap());
    let nearest = pts
        .iter()
        .map(|&(a, b)| ((x0 - a) / 15.0).hypot((x1 - b) / 15.0))
        .fold(f64::INFINITY, f64::min);
    assert!(
        nearest > 0.005,
        "({x0}, {x1}) is {nearest} (unit cube) from a trial already run"
    );
}

fn rosenbrock(x: &[f64]) -> f64 {
    x.windows(2)
        .map(|w| 100.0 * (w[1] - w[0] * w[0]).powi(2) + (1.0 - w[0]).powi(2))
        .sum()
}

#[test]
fn after_finding_a_valley_the_model_does_not_spend_trials_on_unexplored_corners() {
    // The first 48 trials of a rosenbrock4 run (tune-bench, seed 0; log-scaled box
    // [0.01, 10]^4): the best, near 2.5, lie along the valley x_{i+1} = x_i^2 at small x,
    // and corners of the box score up to 1e6. With the model's prior mean at the average
    // loss, the next ask went to the corner (10, 0.01, 10, 10) (value 1.8e6), and 6 of the
    // 40 model-guided trials of that run went to such places; with the prior mean at a high
    // quantile (`GpPolicy::prior_mean_q`), where the model has seen nothing is not worth a trial.
    let s = space(
        "x0 = { type = \"float\", low = 0.01, high = 10.0, log = true }\n\
         x1 = { type = \"float\", low = 0.01, high = 10.0, log = true }\n\
         x2 = { type = \"float\", low = 0.01, high = 10.0, log = true }\n\
         x3 = { type = \"float\", low = 0.01, high = 10.0, log = true }",
    );
    const PTS: &str = "\
        5.538817103575719 2.612927567140163 5.673823890553332 0.029239442358343585\n\
        0.13510806568550138 0.07055472771751549 0.016666761842424598 1.1306204373205717\n\
        0.03976842995103291 0.3358271277914156 1.0622127258114835 0.07113326051053295\n\
        1.2526096467779277 0.015275795295965977 0.13977948610926932 2.5671859423143317\n\
        0.013235535989209216 0.023803949602108156 2.3812490987220793 0.14545728001055322\n\
        0.5215712536329196 1.5936919532753515 0.03382351925632209 9.97085881594535\n\
        0.120483145998471 9.637855646426964 0.07925880022345637 0.34036012310562863\n\
        0.0912519628009773 0.16456680527709938 0.30783298286847094 0.9258808802517716\n\
        0.9641696725026481 0.14964488237512055 0.010000000000000004 0.1151639472416983\n\
        10.0 0.13066713865362042 0.010000000000000004 10.0\n\
        0.2221824261604939 0.11742647870826305 0.03882610939238905 0.0954504595841409\n\
        1.1681645876690003 0.042752618191778294 0.010000000000000004 0.0194388186031713\n\
        0.3462068813015948 0.07803559977426242 8.376369473760475 0.010000000000000004\n\
        0.01800659386279127 0.1778156651539488 0.055382156357297645 0.19792892537206094\n\
        0.09185808854597392 0.05204267500198673 0.010000000000000004 0.14490058226787245\n\
        0.07101599418384216 0.1675341911633166 0.010000000000000004 0.049542961893540946\n\
        0.09249725532153333 0.11912561841744787 0.014454268781240356 0.13919259762607428\n\
        0.02952751315536046 0.07341597771655467 0.02683266721573177 0.05812754921348\n\
        0.08584615247295894 0.09249820023377829 0.036648315596352676 0.07812395389945986\n\
        0.010000000000000004 0.029973149616034596 0.010000000000000004 0.060023062903064445\n\
        0.010000000000000004 0.07936718865312091 0.010000000000000004 0.0431050728190366\n\
        0.010000000000000004 0.010000000000000004 0.010000000000000004 0.291458312231134\n\
        0.010000000000000004 0.010000000000000004 0.010000000000000004 0.010000000000000004\n\
        0.010000000000000004 0.03403635295902525 0.010000000000000004 0.010000000000000004\n\
        0.025471773284632064 0.01997416123306599 0.010000000000000004 0.021853877216217427\n\
        0.010000000000000004 0.015458520086439269 0.0303269429525134 0.010000000000000004\n\
        0.010000000000000004 0.019095937757991583 0.015698301267672087 0.015994909438870976\n\
        0.01921698726935162 0.01877888777428042 0.016086539103971766 0.010000000000000004\n\
        0.010000000000000004 0.07422875252539295 0.053060523202214493 0.010000000000000004\n\
        0.014101799209130433 0.016835752638941198 0.010000000000000004 0.010000000000000004\n\
        0.02166296560916972 0.010000000000000004 0.015080656093609167 0.010000000000000004\n\
        0.04135555693517286 0.010000000000000004 0.010000000000000004 0.010000000000000004\n\
        0.07210113748975239 0.010000000000000004 0.015051575458429547 0.010000000000000004\n\
        0.08772902256581956 0.010000000000000004 0.031757396154948214 0.010000000000000004\n\
        0.08487096074279463 0.01631048836860746 0.02005559041803084 0.010000000000000004\n\
        0.08883949983984112 0.016157537750782783 0.021496828160428787 0.016255059456231596\n\
        0.06851611371599031 0.015589802853237444 0.021889222657839182 0.010400614620306692\n\
        0.13105176835936486 0.015590106312307951 0.018802999800764313 0.010262508268175274\n\
        0.17850097117572078 0.01775629319174818 0.02335030227503203 0.012532483759140043\n\
        0.19843318115858108 0.024922797230753014 0.03509695301150861 0.014521511974433646\n\
        0.20495578405935228 0.01732167385652431 0.03235301495496139 0.017207958663979964\n\
        0.1899385054275684 0.028811181669870248 0.025609954545717843 0.012795184755509595\n\
        0.19553960174171303 0.0395533975589094 0.020525364499200987 0.017208309417597854\n\
        0.19499994537916535 0.03717154134359608 0.01981401547229069 0.02177414956598262\n\
        0.20764394105471623 0.056251383737408935 0.01681066854691412 0.013222090961128054\n\
        0.219279243998806 0.07984861925408918 0.010000000000000004 0.010000000000000004\n\
        0.22892970280078231 0.09126522778239668 0.016514191278891366 0.010000000000000004\n\
        0.21749465708206853 0.06470042113247747 0.013672176174792739 0.011432938296019877";
    let pts: Vec<Vec<f64>> = PTS
        .lines()
        .map(|l| l.split_whitespace().map(|v| v.parse().unwrap()).collect())
        .collect();
    assert_eq!(pts.len(), 48);
    let names = ["x0", "x1", "x2", "x3"];
    let history: Vec<FinishedTrial> = pts
        .iter()
        .enumerate()
        .map(|(i, x)| {
            let mut p = Params::new();
            for (n, &v) in names.iter().zip(x) {
                p.insert((*n).into(), ParamValue::Float(v));
            }
            finished(
                i as u64,
                p,
                Outcome::Complete {
                    value: rosenbrock(x),
                },
            )
        })
        .collect();
    let best = pts
        .iter()
        .map(|x| rosenbrock(x))
        .fold(f64::INFINITY, f64::min);
    assert!(best > 2.5 && best < 2.6, "{best}");
    for seed in 0..3 {
        let p = fresh_ask(&s, &history, seed);
        let x: Vec<f64> = names.iter().map(|n| p[*n].as_f64().unwrap()).collect();
        let v = rosenbrock(&x);
        assert!(v < 100.0, "seed {seed}: {x:?} scores {v}");
    }
}

#[test]
fn the_fit_of_a_noisy_objective_finds_its_noise() {
    // A smooth bowl seen through noise of about a third of its spread over the box. Warm starts
    // alone keep the fit in its low-noise mode, whose short length scales chase the noise; the
    // extra start with the noise high (`GpPolicy::noisy_start_log_sn2`) lets the fit find the noise.
    use rand::SeedableRng;
    let s = space(
        "x = { type = \"float\", low = 0.0, high = 1.0 }\n\
         y = { type = \"float\", low = 0.0, high = 1.0 }",
    );
    let mut noise = rand::rngs::StdRng::seed_from_u64(7);
    let mut g = GpSampler::default();
    let mut history: Vec<FinishedTrial> = Vec::new();
    for n in 0..40u64 {
        let ctx = ask_ctx(&s, &history, &[], n, 3);
        let p = g.ask(&ctx);
        let (x, y) = (p["x"].as_f64().unwrap(), p["y"].as_f64().unwrap());
        let e: f64 = noise.sample(StandardNormal);
        let value = (x - 0.3).powi(2) + (y - 0.6).powi(2) + 0.08 * e;
        history.push(finished(n, p, Outcome::Complete { value }));
    }
    let theta = g.theta.as_ref().expect("the model was fitted");
    let noise_var = theta[theta.len() - 1].exp();
    assert!(
        noise_var > 0.05,
        "fitted noise variance {noise_var} (unit-variance outputs), theta {theta:?}"
    );
}

/// A trial with a learning curve: `(step, value)` for steps 1..=9 of a power law from 2.3 that
/// ends at `end` after 9 steps, cut after `upto` steps.
fn curved(n: u64, x: f64, end: f64, speed: f64, upto: usize) -> FinishedTrial {
    let f = |r: f64| {
        let top = 1.0 - 10f64.powf(-speed);
        end + (2.3 - end) * ((r + 1.0).powf(-speed) - 10f64.powf(-speed)) / top
    };
    let curve: Vec<(u64, f64)> = (1..=upto as u64).map(|s| (s, f(s as f64))).collect();
    let last = curve.last().map(|c| c.1);
    let outcome = if upto == 9 {
        Outcome::Complete {
            value: last.unwrap(),
        }
    } else {
        Outcome::Pruned {
            value: last,
            step: Some(upto as u64),
        }
    };
    let mut t = trial(n, x, outcome);
    t.curve = curve;
    t
}

#[test]
fn a_pruned_trial_enters_the_model_at_the_forecast_of_its_curve() {
    let s = space("x = { type = \"float\", low = 0.0, high = 1.0 }");
    // Complete trials: slow starters that end low, fast ones that flatten high.
    let mut history = Vec::new();
    for i in 0..4u64 {
        let d = 0.01 * i as f64;
        history.push(curved(2 * i, 0.05 * i as f64, 0.2 + d, 0.3, 9));
        history.push(curved(2 * i + 1, 0.5 + 0.05 * i as f64, 0.6 + d, 2.0, 9));
    }
    // Two trials cut after 3 steps: a slow starter still high (ranked last there) and a fast
    // one that has flattened. Their last values say the opposite of where they were going.
    history.push(curved(8, 0.3, 0.21, 0.3, 3));
    history.push(curved(9, 0.9, 0.61, 2.0, 3));
    let ctx = ask_ctx(&s, &history, &[], 10, 0);
    let obs = observations(
        &GpPolicy::default(),
        &ctx,
        &Layout::new(&s),
        Modelled::Single,
    )
    .expect("a model");
    let (slow, fast) = (obs[8].z, obs[9].z);
    assert!(
        slow < fast,
        "the slow starter forecasts better: {slow} vs {fast}"
    );
    assert!(
        slow < obs[1].z,
        "and better than the complete fast ones: {slow} vs {}",
        obs[1].z
    );
    // Without enough complete curves to learn from, the old rule: last value, at least the
    // median.
    let few = vec![
        curved(0, 0.1, 0.2, 0.3, 9),
        curved(1, 0.2, 0.6, 2.0, 9),
        curved(2, 0.5, 0.21, 0.3, 3),
    ];
    let ctx = ask_ctx(&s, &few, &[], 3, 0);
    let obs = observations(
        &GpPolicy::default(),
        &ctx,
        &Layout::new(&s),
        Modelled::Single,
    )
    .expect("a model");
    let median = 0.5 * (obs[0].z + obs[1].z);
    assert!(obs[2].z >= median - 1e-12, "{} < {median}", obs[2].z);
}

#[test]
fn the_model_rung_is_the_highest_step_three_trials_reached() {
    let c = |steps: &[u64]| -> Vec<(u64, f64)> { steps.iter().map(|&s| (s, 1.0)).collect() };
    // ASHA-like: everyone at 1, three promoted to 3, one to 9.
    let curves = vec![
        c(&[1]),
        c(&[1, 2, 3]),
        c(&[1, 2, 3, 9]),
        c(&[1]),
        c(&[1, 3]),
    ];
    assert_eq!(model_rung(&curves), Some(3));
    // Reports at steps that do not line up: a trial counts at a rung it passed, at its last
    // value before it.
    let curves = vec![c(&[2, 7]), c(&[5, 10]), c(&[3, 6, 9])];
    assert_eq!(model_rung(&curves), Some(7));
    // Too few curves, or none overlapping.
    assert_eq!(model_rung(&[c(&[1, 2]), c(&[1, 2])]), None);
    assert_eq!(model_rung(&[c(&[1]), c(&[2]), c(&[3])]), None);
    assert_eq!(model_rung(&[c(&[]), c(&[]), c(&[])]), None);
}

/// Asks `n` trials of a default GP one at a time on a curve `loss(x, step)` observed at steps
/// 1, 3 and 9, where every trial is pruned: at step 1 unless it is in the best third of the
/// trials that reached step 1 so far, then at step 3 likewise, never completing.
fn every_trial_pruned(n: usize, seed: u64, loss: &dyn Fn(f64, f64) -> f64) -> Vec<FinishedTrial> {
    let s = space("x = { type = \"float\", low = 0.0, high = 1.0 }");
    let mut history: Vec<FinishedTrial> = Vec::new();
    let mut sampler = GpSampler::default();
    for k in 0..n {
        let p = sampler.ask(&ask_ctx(&s, &history, &[], k as u64, seed));
        let ParamValue::Float(x) = p["x"] else {
            panic!("a float")
        };
        let mut curve = Vec::new();
        for rung in [1u64, 3] {
            let v = loss(x, rung as f64);
            curve.push((rung, v));
            let mut at: Vec<f64> = history
                .iter()
                .filter_map(|t| t.curve.iter().find(|c| c.0 == rung).map(|c| c.1))
                .collect();
            at.push(v);
            at.sort_by(f64::total_cmp);
            if v > at[(at.len() - 1) / 3] {
                break;
            }
        }
        let &(step, value) = curve.last().expect("a report");
        let mut t = finished(
            k as u64,
            p,
            Outcome::Pruned {
                value: Some(value),
                step: Some(step),
            },
        );
        t.curve = curve;
        history.push(t);
    }
    history
}

#[test]
fn a_study_whose_every_trial_is_pruned_gets_model_guided_proposals() {
    let loss = |x: f64, step: f64| (x - 0.7) * (x - 0.7) + 1.0 / step;
    let mut near = Vec::new();
    for seed in 0..3 {
        let h = every_trial_pruned(24, seed, &loss);
        assert!(h.iter().all(|t| t.value().is_none()), "none complete");
        let xs: Vec<f64> = h
            .iter()
            .map(|t| match t.params["x"] {
                ParamValue::Float(x) => x,
                _ => unreachable!(),
            })
            .collect();
        // Past the initial design most proposals home in on the best rung value (EI still
        // explores now and then), where the Sobol sequence would keep spreading over [0, 1]
        // (one point in ten within 0.05).
        let late = &xs[14..];
        near.push(late.iter().filter(|x| (*x - 0.7).abs() < 0.05).count());
        // And they are not one point asked again and again.
        let mut distinct = late.to_vec();
        distinct.sort_by(f64::total_cmp);
        distinct.dedup();
        assert!(distinct.len() >= 8, "seed {seed}: {late:?}");
    }
    assert!(
        near.iter().all(|&n| n >= 5),
        "of the last 10 proposals, within 0.05 of the rung optimum: {near:?}"
    );
}
