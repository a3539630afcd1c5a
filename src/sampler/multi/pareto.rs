//! Pareto dominance, non-dominated sorting, crowding distance and hypervolume, on losses
//! (every objective turned to lower-is-better with `Direction::loss`).
//!
//! Everything here is a pure function of loss vectors (`&[Vec<f64>]`, one vector per point,
//! all of one length), shared by NSGA-II, the benchmarks, `tune best` and the TUI. Turning a
//! study's history into loss vectors is [`losses`]: the one place that decides which trials
//! take part (complete ones with every value finite).

use std::cmp::Ordering;

use crate::trial::{Direction, FinishedTrial};

/// Whether `a` Pareto-dominates `b`: no worse in every objective and better in at least one.
/// Equal vectors do not dominate each other, so duplicates share a front.
pub fn dominates(a: &[f64], b: &[f64]) -> bool {
    let mut better = false;
    for (x, y) in a.iter().zip(b) {
        match x.total_cmp(y) {
            Ordering::Greater => return false,
            Ordering::Less => better = true,
            Ordering::Equal => {}
        }
    }
    better
}

/// Deb's fast non-dominated sort: the indices of `points` by front, the first front (the
/// Pareto front) first. Within a front, indices ascend. O(k n²) for k objectives.
pub fn non_dominated_sort(points: &[Vec<f64>]) -> Vec<Vec<usize>> {
    let n = points.len();
    let mut dominated_by: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut count = vec![0usize; n];
    for i in 0..n {
        for j in i + 1..n {
            if dominates(&points[i], &points[j]) {
                dominated_by[i].push(j);
                count[j] += 1;
            } else if dominates(&points[j], &points[i]) {
                dominated_by[j].push(i);
                count[i] += 1;
            }
        }
    }
    let mut fronts = Vec::new();
    let mut current: Vec<usize> = (0..n).filter(|&i| count[i] == 0).collect();
    while !current.is_empty() {
        let mut next = Vec::new();
        for &i in &current {
            for &j in &dominated_by[i] {
                count[j] -= 1;
                if count[j] == 0 {
                    next.push(j);
                }
            }
        }
        next.sort_unstable();
        fronts.push(current);
        current = next;
    }
    fronts
}

/// The indices of the points no other point dominates, ascending.
pub fn pareto_front(points: &[Vec<f64>]) -> Vec<usize> {
    if points.iter().all(|p| p.len() == 2) {
        return pareto_front_2d(points);
    }
    (0..points.len())
        .filter(|&i| !points.iter().any(|q| dominates(q, &points[i])))
        .collect()
}

/// The two-objective front in O(n log n) (a study of thousands of trials is printed by
/// `tune best` and drawn by the TUI): in lexicographic order, a point is dominated exactly when
/// an earlier one has a lower second objective, or the same one with a lower first.
fn pareto_front_2d(points: &[Vec<f64>]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..points.len()).collect();
    order.sort_by(|&a, &b| {
        points[a][0]
            .total_cmp(&points[b][0])
            .then(points[a][1].total_cmp(&points[b][1]))
    });
    let mut front = Vec::new();
    // The lowest second objective so far, and the first (lowest) first objective reaching it.
    let mut best: Option<(f64, f64)> = None;
    for i in order {
        let (x, y) = (points[i][0], points[i][1]);
        let dominated = match best {
            Some((by, bx)) => {
                by.total_cmp(&y).is_lt() || (by.total_cmp(&y).is_eq() && bx.total_cmp(&x).is_lt())
            }
            None => false,
        };
        if !dominated {
            front.push(i);
        }
        if best.is_none_or(|(by, _)| y.total_cmp(&by).is_lt()) {
            best = Some((y, x));
        }
    }
    front.sort_unstable();
    front
}

/// NSGA-II's crowding distance of each point of `front` (indices into `points`), in the order
/// of `front`: per objective, the gap between a point's neighbours normalised by the front's
/// range, summed. The extremes of every objective get infinity, so they are always kept.
pub fn crowding_distance(points: &[Vec<f64>], front: &[usize]) -> Vec<f64> {
    let m = front.len();
    let mut dist = vec![0.0; m];
    if m <= 2 {
        return vec![f64::INFINITY; m];
    }
    let k = points[front[0]].len();
    let mut order: Vec<usize> = (0..m).collect();
    let column = |obj: usize| -> Vec<f64> { front.iter().map(|&i| points[i][obj]).collect() };
    for vals in (0..k).map(column) {
        order.sort_by(|&a, &b| vals[a].total_cmp(&vals[b]).then(a.cmp(&b)));
        let range = vals[order[m - 1]] - vals[order[0]];
        dist[order[0]] = f64::INFINITY;
        dist[order[m - 1]] = f64::INFINITY;
        if range <= 0.0 || !range.is_finite() {
            continue;
        }
        for w in order.windows(3) {
            dist[w[1]] += (vals[w[2]] - vals[w[0]]) / range;
        }
    }
    dist
}

/// The hypervolume dominated by `points` and bounded by `reference`: the measure of the set of
/// vectors that some point dominates (weakly) and that dominate `reference`. Exact for any
/// number of objectives: a sweep in 2-D, slicing along the last objective above (HSO), after
/// dropping dominated points. A point that is not strictly better than the reference in every
/// objective (or has a NaN) adds nothing.
pub fn hypervolume(points: &[Vec<f64>], reference: &[f64]) -> f64 {
    let inside: Vec<Vec<f64>> = points
        .iter()
        .filter(|p| p.len() == reference.len() && p.iter().zip(reference).all(|(x, r)| x < r))
        .cloned()
        .collect();
    let front: Vec<Vec<f64>> = pareto_front(&inside)
        .into_iter()
        .map(|i| inside[i].clone())
        .collect();
    hv(front, reference)
}

/// The hypervolume of points all strictly inside `reference`.
fn hv(mut points: Vec<Vec<f64>>, reference: &[f64]) -> f64 {
    let k = reference.len();
    if points.is_empty() {
        return 0.0;
    }
    match k {
        0 => 0.0,
        1 => reference[0] - points.iter().map(|p| p[0]).fold(f64::INFINITY, f64::min),
        2 => {
            // Sweep by the first objective: each point adds the strip between it and the best
            // second objective seen so far.
            points.sort_by(|a, b| a[0].total_cmp(&b[0]).then(a[1].total_cmp(&b[1])));
            let mut area = 0.0;
            let mut best_y = reference[1];
            for p in &points {
                if p[1] < best_y {
                    area += (reference[0] - p[0]) * (best_y - p[1]);
                    best_y = p[1];
                }
            }
            area
        }
        _ => {
            // Slice along the last objective: between consecutive distinct values, the
            // cross-section is the (k-1)-dimensional hypervolume of the points at or below.
            points.sort_by(|a, b| a[k - 1].total_cmp(&b[k - 1]));
            let sub_ref = &reference[..k - 1];
            let mut volume = 0.0;
            let mut i = 0;
            while i < points.len() {
                let z = points[i][k - 1];
                while i < points.len() && points[i][k - 1] <= z {
                    i += 1;
                }
                let top = if i < points.len() {
                    points[i][k - 1]
                } else {
                    reference[k - 1]
                };
                let slice: Vec<Vec<f64>> =
                    points[..i].iter().map(|p| p[..k - 1].to_vec()).collect();
                let slice: Vec<Vec<f64>> = pareto_front(&slice)
                    .into_iter()
                    .map(|j| slice[j].clone())
                    .collect();
                volume += hv(slice, sub_ref) * (top - z);
            }
            volume
        }
    }
}

/// The loss vectors (every objective lower-is-better) of the history's complete trials whose
/// values are all finite and one per direction, each with its index in `history`. Pruned,
/// failed and incomplete-valued trials are left out: a Pareto front compares finished results.
pub fn losses(history: &[FinishedTrial], directions: &[Direction]) -> Vec<(usize, Vec<f64>)> {
    history
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            let v = t.values()?;
            if v.len() != directions.len() || !v.iter().all(|x| x.is_finite()) {
                return None;
            }
            Some((
                i,
                v.iter().zip(directions).map(|(x, d)| d.loss(*x)).collect(),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trial::{Outcome, TrialNumber};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Random points on a coarse grid, so that ties and exact duplicates are common.
    fn grid_points(seed: u64, n: usize, k: usize) -> Vec<Vec<f64>> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n)
            .map(|_| {
                (0..k)
                    .map(|_| f64::from(rng.random_range(0..6u32)) / 5.0)
                    .collect()
            })
            .collect()
    }

    fn brute_front(points: &[Vec<f64>]) -> Vec<usize> {
        (0..points.len())
            .filter(|&i| {
                !(0..points.len()).any(|j| {
                    points[j].iter().zip(&points[i]).all(|(a, b)| a <= b)
                        && points[j].iter().zip(&points[i]).any(|(a, b)| a < b)
                })
            })
            .collect()
    }

    #[test]
    fn the_pareto_front_matches_brute_force_with_ties_and_duplicates() {
        for k in [2, 3] {
            for seed in 0..20 {
                let pts = grid_points(seed, 40, k);
                assert_eq!(pareto_front(&pts), brute_front(&pts), "k={k} seed={seed}");
            }
        }
    }

    #[test]
    fn non_dominated_sort_peels_fronts_in_order() {
        for k in [2, 3] {
            for seed in 0..20 {
                let pts = grid_points(seed + 100, 50, k);
                let fronts = non_dominated_sort(&pts);
                // Each front is the brute-force front of what the earlier fronts left.
                let mut left: Vec<usize> = (0..pts.len()).collect();
                for f in &fronts {
                    let sub: Vec<Vec<f64>> = left.iter().map(|&i| pts[i].clone()).collect();
                    let want: Vec<usize> = brute_front(&sub).into_iter().map(|j| left[j]).collect();
                    assert_eq!(f, &want, "k={k} seed={seed}");
                    left.retain(|i| !f.contains(i));
                }
                assert!(left.is_empty());
                // No point of a later front dominates one of an earlier front.
                for (a, fa) in fronts.iter().enumerate() {
                    for fb in &fronts[a + 1..] {
                        for &i in fa {
                            for &j in fb {
                                assert!(!dominates(&pts[j], &pts[i]));
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn duplicates_do_not_dominate_each_other() {
        let pts = vec![vec![1.0, 2.0], vec![1.0, 2.0], vec![2.0, 2.0]];
        assert_eq!(pareto_front(&pts), vec![0, 1]);
        assert_eq!(non_dominated_sort(&pts), vec![vec![0, 1], vec![2]]);
    }

    #[test]
    fn crowding_distance_keeps_extremes_and_measures_gaps() {
        let pts = vec![
            vec![0.0, 4.0],
            vec![1.0, 3.0],
            vec![3.0, 1.0],
            vec![4.0, 0.0],
        ];
        let d = crowding_distance(&pts, &[0, 1, 2, 3]);
        assert!(d[0].is_infinite() && d[3].is_infinite());
        // Point 1: neighbours 0 and 2 -> (3-0)/4 + (4-1)/4 = 1.5, the same for point 2.
        assert!((d[1] - 1.5).abs() < 1e-12 && (d[2] - 1.5).abs() < 1e-12);
        assert_eq!(crowding_distance(&pts, &[1, 2]), vec![f64::INFINITY; 2]);
    }

    #[test]
    fn a_single_point_has_the_volume_of_its_box() {
        assert!((hypervolume(&[vec![0.5, 0.25]], &[1.0, 1.0]) - 0.375).abs() < 1e-12);
        let v = hypervolume(&[vec![0.5, 0.25, 0.0]], &[1.0, 1.0, 2.0]);
        assert!((v - 0.75).abs() < 1e-12);
        let v = hypervolume(&[vec![0.0, 0.0, 0.0, 0.5]], &[1.0, 2.0, 3.0, 1.0]);
        assert!((v - 3.0).abs() < 1e-12);
    }

    #[test]
    fn a_two_dimensional_staircase_sums_its_steps() {
        // Reference (4, 4); points (1,3), (2,2), (3,1) and a dominated (3.5,3.5). By columns:
        // x in [1,2) covers y in [3,4): 1; [2,3): 2; [3,4): 3; total 6.
        let pts = vec![
            vec![1.0, 3.0],
            vec![2.0, 2.0],
            vec![3.0, 1.0],
            vec![3.5, 3.5],
        ];
        assert!((hypervolume(&pts, &[4.0, 4.0]) - 6.0).abs() < 1e-12);
    }

    #[test]
    fn points_not_strictly_inside_the_reference_add_nothing() {
        let pts = vec![vec![1.0, 0.0], vec![0.0, 2.0], vec![f64::NAN, 0.0]];
        assert_eq!(hypervolume(&pts, &[1.0, 1.0]), 0.0);
        assert_eq!(hypervolume(&[], &[1.0, 1.0]), 0.0);
    }

    #[test]
    fn three_dimensional_known_cases() {
        // (0,1,1), (1,0,1), (1,1,0) against (2,2,2): each box 2, every pair and the triple
        // meet in the unit cube [1,2]^3: 3*2 - 3*1 + 1 = 4.
        let pts = vec![
            vec![0.0, 1.0, 1.0],
            vec![1.0, 0.0, 1.0],
            vec![1.0, 1.0, 0.0],
        ];
        assert!((hypervolume(&pts, &[2.0, 2.0, 2.0]) - 4.0).abs() < 1e-12);
        // The DTLZ2 extremes (1,0,0), (0,1,0), (0,0,1) against (1.1, 1.1, 1.1):
        // each box 0.1*1.1*1.1 = 0.121; pairwise overlaps 0.1*0.1*1.1 = 0.011; triple 0.001.
        let pts = vec![
            vec![1.0, 0.0, 0.0],
            vec![0.0, 1.0, 0.0],
            vec![0.0, 0.0, 1.0],
        ];
        let want = 3.0 * 0.121 - 3.0 * 0.011 + 0.001;
        assert!((hypervolume(&pts, &[1.1, 1.1, 1.1]) - want).abs() < 1e-12);
    }

    /// Inclusion–exclusion over the boxes of up to 4 points: exact, and independent of the
    /// sweep and slicing code.
    fn inclusion_exclusion(points: &[Vec<f64>], reference: &[f64]) -> f64 {
        let n = points.len();
        let mut total = 0.0;
        for mask in 1u32..(1 << n) {
            let mut vol = 1.0;
            for (d, r) in reference.iter().enumerate() {
                let worst = (0..n)
                    .filter(|i| mask & (1 << i) != 0)
                    .map(|i| points[i][d])
                    .fold(f64::NEG_INFINITY, f64::max);
                vol *= (r - worst).max(0.0);
            }
            total += if mask.count_ones() % 2 == 1 {
                vol
            } else {
                -vol
            };
        }
        total
    }

    #[test]
    fn hypervolume_matches_inclusion_exclusion_on_random_small_sets() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for k in 2..=4 {
            for _ in 0..200 {
                let n = rng.random_range(1..=4);
                let pts: Vec<Vec<f64>> = (0..n)
                    .map(|_| (0..k).map(|_| rng.random::<f64>()).collect())
                    .collect();
                let r = vec![1.0; k];
                let want = inclusion_exclusion(&pts, &r);
                assert!(
                    (hypervolume(&pts, &r) - want).abs() < 1e-12,
                    "k={k} {pts:?}"
                );
            }
        }
    }

    #[test]
    fn hypervolume_matches_a_monte_carlo_estimate_on_many_points() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for k in [2, 3] {
            let pts: Vec<Vec<f64>> = (0..30)
                .map(|_| (0..k).map(|_| rng.random::<f64>()).collect())
                .collect();
            let r = vec![1.0; k];
            let n = 200_000;
            let hits = (0..n)
                .filter(|_| {
                    let x: Vec<f64> = (0..k).map(|_| rng.random::<f64>()).collect();
                    pts.iter().any(|p| p.iter().zip(&x).all(|(a, b)| a <= b))
                })
                .count();
            let est = hits as f64 / n as f64;
            // Standard error below 0.0012 at n = 200k; allow 4 of them.
            assert!((hypervolume(&pts, &r) - est).abs() < 0.005, "k={k}");
        }
    }

    #[test]
    fn losses_keep_complete_finite_trials_in_lower_is_better_form() {
        let t = |n: u64, outcome: Outcome, others: Vec<f64>| FinishedTrial {
            number: TrialNumber(n),
            params: Default::default(),
            outcome,
            curve: Vec::new(),
            seconds: None,
            others,
        };
        let history = vec![
            t(0, Outcome::Complete { value: 1.0 }, vec![2.0]),
            t(1, Outcome::Failed, vec![]),
            t(
                2,
                Outcome::Pruned {
                    value: Some(0.0),
                    step: Some(1),
                },
                vec![],
            ),
            t(3, Outcome::Complete { value: 1.0 }, vec![f64::NAN]),
            t(4, Outcome::Complete { value: 3.0 }, vec![]),
            t(5, Outcome::Complete { value: 0.5 }, vec![4.0]),
        ];
        let dirs = [Direction::Minimize, Direction::Maximize];
        assert_eq!(
            losses(&history, &dirs),
            vec![(0, vec![1.0, -2.0]), (5, vec![0.5, -4.0])]
        );
    }
}
