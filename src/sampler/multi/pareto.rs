//! Pareto dominance, non-dominated sorting, crowding distance and hypervolume, on losses
//! (every objective turned to lower-is-better with `Direction::loss`).
