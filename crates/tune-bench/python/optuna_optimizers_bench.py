#!/usr/bin/env python3
"""Optuna's side of the public, trap, failure and noisy problems of `tune bench optimizers
--problems public,trap,fail,noisy` (issue 13): Optuna's GPSampler and TPESampler on the same
problems and seeds. A
trial that fails (diverges, runs out of memory, crashes) is told as `TrialState.FAIL`, which is
how an Optuna user sees a crash (`study.optimize` does the same for an objective that raises,
with `catch`).

    .venv/bin/python crates/tune-bench/python/optuna_optimizers_bench.py --problems trap --seeds 10

The formulas, spaces and constants are those of crates/tune-bench/src/problems.rs
(`branin`, `hartmann6`, `rosenbrock4`, `train_surrogate`, `trap_degree3`, `trap_degree5`, `trap_cat_pair`, `trap_cat5`, `fail_diverge`, `fail_oom`,
`fail_crash`, `branin_noisy`, `hartmann6_noisy`; not `train_surrogate_noisy`), and the figures
are those of the Rust harness (the noise draws are Python's, not the same numbers):
  - seeds 0 .. S-1 are the samplers' seeds (`seed=` of each sampler);
  - with `--q 4`, four asks are outstanding and told oldest first, one new ask per finished
    trial, as tune's harness does;
  - the score is 100 at the optimum and 0 at random search's median best after t trials,
    clipped to +-100; the reference is Optuna's RandomSampler with seeds 1 000 000 .. +R-1
    (the seeds tune's harness gives its own random search), or the medians given with
    `--rand-med NAME=V25,V50` (e.g. the ones tune's run printed, to score on one reference);
  - `worst` is the lowest score of any seed, `below` the fraction of seeds worse than the
    random median;
  - a run's best counts only trials that ran; "failed" is the mean number of FAIL trials among
    the first t.
Requires optuna (GPSampler also needs torch and scipy). Prints one Markdown table per problem.
"""

import argparse
import math
import random
import statistics
import sys

import optuna
from optuna.trial import TrialState

NAN = float("nan")


def fail_diverge(p):
    lr, bs, wd = p["lr"], p["batch_size"], p["weight_decay"]
    lr_div = 0.03 * math.sqrt(bs / 256.0)
    if lr > lr_div:
        return NAN
    d = math.log10(lr / (0.5 * lr_div))
    return 0.08 + 0.04 * d * d + 0.004 * math.log2(bs / 64.0) ** 2 + 2.0 * (wd - 0.01) ** 2


def fail_oom(p):
    bs, w, lr = p["batch_size"], p["width"], p["lr"]
    if bs * w > 65536:
        return NAN
    return (
        0.10
        + 0.01 * (math.log2(w) - 10.0) ** 2
        + 0.01 * (math.log2(bs) - 7.0) ** 2
        + 0.05 * (math.log10(lr) + 2.5) ** 2
    )


def fail_crash(p):
    lr, w, prec = p["lr"], p["warmup"], p["precision"]
    if lr > 0.3 or (prec == "fp16" and lr > 0.003 * (1.0 + 10.0 * w)):
        return NAN
    base = {"fp16": 0.10, "bf16": 0.11}.get(prec, 0.13)
    return base + 0.04 * (math.log10(lr) + 1.5) ** 2 + 0.05 * (w - 0.2) ** 2


def bowl(a, c, x, centre):
    """`a + c |x - centre|^2`: one branch of a trap problem (problems.rs `bowl`)."""
    return a + c * sum((v - m) ** 2 for v, m in zip(x, centre))


def log_pos(v, lo, hi):
    return (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))


def trap_degree3(p):
    x = [log_pos(p["alpha"], 1e-6, 1e2), p["scale"]]
    d = p["degree"]
    if d == 1:
        return bowl(0.30, 0.08, x, [0.70, 0.50])
    if d == 2:
        return bowl(0.15, 3.0, x, [0.35, 0.20])
    return bowl(0.20, 4.0, x, [0.45, 0.25])


def trap_degree5(p):
    x = [log_pos(p["alpha"], 1e-6, 1e2), log_pos(p["lr"], 1e-4, 1.0), p["frac"]]
    branches = {
        1: (0.30, 0.06, [0.70, 0.50, 0.50]),
        2: (0.24, 2.0, [0.45, 0.40, 0.30]),
        3: (0.16, 3.0, [0.35, 0.30, 0.25]),
        4: (0.20, 4.0, [0.30, 0.30, 0.20]),
    }
    a, c, centre = branches.get(p["degree"], (0.27, 5.0, [0.25, 0.30, 0.20]))
    return bowl(a, c, x, centre)


def trap_cat_pair(p):
    x = [(p["max_features"] - 0.1) / 0.9, math.log2(p["min_samples_leaf"]) / 5.0]
    branches = {
        ("gini", True): (0.30, 0.06, [0.5, 0.5]),
        ("gini", False): (0.27, 1.5, [0.4, 0.2]),
        ("entropy", True): (0.26, 1.5, [0.6, 0.6]),
        ("entropy", False): (0.17, 2.5, [0.3, 0.4]),
        ("log_loss", True): (0.28, 1.5, [0.6, 0.6]),
        ("log_loss", False): (0.20, 2.5, [0.3, 0.4]),
    }
    a, c, centre = branches[(p["criterion"], p["bootstrap"])]
    return bowl(a, c, x, centre)


def trap_cat5(p):
    x = [log_pos(p["lr"], 1e-4, 1.0), p["dropout"] / 0.5]
    # activation: (floor, curvature, centre, layer penalty, best layers)
    branches = {
        "relu": (0.30, 0.05, [0.5, 0.5], 0.005, 2.0),
        "tanh": (0.34, 1.0, [0.5, 0.3], 0.02, 2.0),
        "gelu": (0.16, 2.5, [0.4, 0.2], 0.03, 3.0),
        "silu": (0.19, 2.5, [0.45, 0.25], 0.03, 3.0),
        "elu": (0.27, 1.5, [0.55, 0.4], 0.02, 2.0),
    }
    a, c, centre, lp, best = branches[p["activation"]]
    return bowl(a, c, x, centre) + lp * (p["layers"] - best) ** 2


def space_degree3(t):
    return {
        "degree": t.suggest_int("degree", 1, 3),
        "alpha": t.suggest_float("alpha", 1e-6, 1e2, log=True),
        "scale": t.suggest_float("scale", 0.0, 1.0),
    }


def space_degree5(t):
    return {
        "degree": t.suggest_int("degree", 1, 5),
        "alpha": t.suggest_float("alpha", 1e-6, 1e2, log=True),
        "lr": t.suggest_float("lr", 1e-4, 1.0, log=True),
        "frac": t.suggest_float("frac", 0.0, 1.0),
    }


def space_cat_pair(t):
    return {
        "criterion": t.suggest_categorical("criterion", ["gini", "entropy", "log_loss"]),
        "bootstrap": t.suggest_categorical("bootstrap", [True, False]),
        "max_features": t.suggest_float("max_features", 0.1, 1.0),
        "min_samples_leaf": t.suggest_int("min_samples_leaf", 1, 32, log=True),
    }


def space_cat5(t):
    return {
        "activation": t.suggest_categorical("activation", ["relu", "tanh", "gelu", "silu", "elu"]),
        "layers": t.suggest_int("layers", 1, 4),
        "lr": t.suggest_float("lr", 1e-4, 1.0, log=True),
        "dropout": t.suggest_float("dropout", 0.0, 0.5),
    }



def space_diverge(t):
    return {
        "lr": t.suggest_float("lr", 1e-5, 1.0, log=True),
        "batch_size": t.suggest_int("batch_size", 16, 1024, log=True),
        "weight_decay": t.suggest_float("weight_decay", 0.0, 0.1),
    }


def space_oom(t):
    return {
        "batch_size": t.suggest_int("batch_size", 16, 1024, log=True),
        "width": t.suggest_int("width", 32, 2048, log=True),
        "lr": t.suggest_float("lr", 1e-4, 0.1, log=True),
    }


def space_crash(t):
    return {
        "precision": t.suggest_categorical("precision", ["fp32", "bf16", "fp16"]),
        "lr": t.suggest_float("lr", 1e-4, 1.0, log=True),
        "warmup": t.suggest_float("warmup", 0.0, 1.0),
    }


def branin(p):
    x0, x1 = p["x0"], p["x1"]
    pi = math.pi
    return (
        (x1 - 5.1 / (4 * pi * pi) * x0 * x0 + 5 / pi * x0 - 6) ** 2
        + 10 * (1 - 1 / (8 * pi)) * math.cos(x0)
        + 10
    )


def space_branin(t):
    return {"x0": t.suggest_float("x0", -5.0, 10.0), "x1": t.suggest_float("x1", 0.0, 15.0)}


H_ALPHA = [1.0, 1.2, 3.0, 3.2]
H_A = [
    [10, 3, 17, 3.5, 1.7, 8],
    [0.05, 10, 17, 0.1, 8, 14],
    [3, 3.5, 1.7, 10, 17, 8],
    [17, 8, 0.05, 10, 0.1, 14],
]
H_P = [
    [1312, 1696, 5569, 124, 8283, 5886],
    [2329, 4135, 8307, 3736, 1004, 9991],
    [2348, 1451, 3522, 2883, 3047, 6650],
    [4047, 8828, 8732, 5743, 1091, 381],
]


def hartmann6(p):
    x = [p[f"x{j}"] for j in range(6)]
    return -sum(
        H_ALPHA[i] * math.exp(-sum(H_A[i][j] * (x[j] - 1e-4 * H_P[i][j]) ** 2 for j in range(6)))
        for i in range(4)
    )


def space_hartmann6(t):
    return {f"x{j}": t.suggest_float(f"x{j}", 0.0, 1.0) for j in range(6)}


def rosenbrock4(p):
    x = [p[f"x{j}"] for j in range(4)]
    return sum(100.0 * (x[i + 1] - x[i] * x[i]) ** 2 + (1.0 - x[i]) ** 2 for i in range(3))


def space_rosenbrock4(t):
    return {f"x{j}": t.suggest_float(f"x{j}", 0.01, 10.0, log=True) for j in range(4)}


def softplus(z):
    return z if z > 30.0 else math.log1p(math.exp(z))


def sigmoid(z):
    return 1.0 / (1.0 + math.exp(-z))


def train_surrogate(p):
    lr, bs, acc, wd = p["lr"], p["batch_size"], p["accumulation"], p["weight_decay"]
    b = bs * acc
    r = math.log2(b / 256.0)
    if p["optimizer"] == "sgd":
        m = p["momentum"]
        lr_eff = lr / (1.0 - m)
        lr_star = 0.1 * 2.0**r
        wd_star = min(max(5e-4 * lr_star / lr_eff, 0.0), 0.1)
        extra = 0.02 * math.log10((1.0 - m) / 0.1) ** 2 + 0.015 * math.log10(
            (wd + 1e-4) / (wd_star + 1e-4)
        ) ** 2
        w, base = 0.5, 0.060
    else:
        lr_eff = lr
        lr_star = 2e-3 * 2.0 ** (r / 2.0)
        wd_w = min(max(0.05 * math.sqrt(1e-3 / lr), 0.0), 0.1)
        if p["optimizer"] == "adamw":
            extra = 5.0 * (wd - wd_w) ** 2
        else:
            extra = 5.0 * wd_w * wd_w + 0.5 * wd
        w, base = 0.7, 0.064
    d = math.log10(lr_eff / lr_star)
    lr_pen = 0.03 * (d / w) ** 2
    bs_pen = 0.010 * softplus(1.5 * math.log2(b / 2048.0)) + 0.010 * softplus(
        1.5 * math.log2(32.0 / b)
    )
    bn_pen = 0.008 * softplus(2.0 * math.log2(24.0 / bs))
    err = base + extra + lr_pen + bs_pen + bn_pen
    p_div = sigmoid(6.0 * (d - 1.0))
    return 0.9 * (1.0 - math.exp(-err / 0.9)) * (1.0 - p_div) + 0.9 * p_div


def space_train_surrogate(t):
    p = {
        "lr": t.suggest_float("lr", 1e-5, 1.0, log=True),
        "optimizer": t.suggest_categorical("optimizer", ["sgd", "adam", "adamw"]),
    }
    if p["optimizer"] == "sgd":
        p["momentum"] = t.suggest_float("momentum", 0.0, 0.99)
    p["batch_size"] = t.suggest_int("batch_size", 16, 1024, log=True)
    p["accumulation"] = t.suggest_int("accumulation", 1, 8)
    p["weight_decay"] = t.suggest_float("weight_decay", 0.0, 0.1)
    return p


# The public problems (`--problems public`), as in problems.rs.
PUBLIC = ["branin", "hartmann6", "rosenbrock4", "train_surrogate"]

# name, space, formula, optimum (as in problems.rs)
PROBLEMS = [
    ("branin", space_branin, branin, 0.397887357729739),
    ("hartmann6", space_hartmann6, hartmann6, -3.32236801141551),
    ("rosenbrock4", space_rosenbrock4, rosenbrock4, 0.0),
    ("train_surrogate", space_train_surrogate, train_surrogate, 0.0600742),
    ("trap_degree3", space_degree3, trap_degree3, 0.15),
    ("trap_degree5", space_degree5, trap_degree5, 0.16),
    ("trap_cat_pair", space_cat_pair, trap_cat_pair, 0.17),
    ("trap_cat5", space_cat5, trap_cat5, 0.16),
    ("fail_diverge", space_diverge, fail_diverge, 0.08),
    ("fail_oom", space_oom, fail_oom, 0.1050047939192687),
    ("fail_crash", space_crash, fail_crash, 0.10618120229300967),
    ("branin_noisy", space_branin, branin, 0.397887357729739),
    ("hartmann6_noisy", space_hartmann6, hartmann6, -3.32236801141551),
]

# The noisy problems' noise (standard deviation), as in problems.rs: every told value gets
# Gaussian noise, and a run is scored on the true value of the trial that looked best.
NOISE = {"branin_noisy": 0.1, "hartmann6_noisy": 0.2}


def run(sampler, space, f, budget, q=1, noise=0.0, seed=0):
    """Best value after each trial, and failed trials among the first t; `q` asks outstanding,
    told oldest first. With `noise`, every told value gets Gaussian noise and the best is the
    true value of the trial whose told value is the lowest."""
    study = optuna.create_study(direction="minimize", sampler=sampler)
    best, failed, n_failed, b = [], [], 0, math.inf
    seen = math.inf
    draws = random.Random(seed)
    pending = []
    while len(best) < budget:
        while len(pending) < q and len(best) + len(pending) < budget:
            trial = study.ask()
            pending.append((trial, space(trial)))
        trial, params = pending.pop(0)
        truth = f(params)
        v = truth + noise * draws.gauss(0.0, 1.0) if noise > 0.0 else truth
        if math.isfinite(v):
            study.tell(trial, v)
            if v < seen:
                seen, b = v, truth
        else:
            study.tell(trial, state=TrialState.FAIL)
            n_failed += 1
        best.append(b)
        failed.append(n_failed)
    return best, failed


def score(best, opt, rand_med):
    den = rand_med - opt
    if den <= 0.0:
        return 100.0 if best <= opt else -100.0
    return max(-100.0, min(100.0, 100.0 * (1.0 - (best - opt) / den)))


def make(name, seed):
    if name == "optuna-gp":
        return optuna.samplers.GPSampler(seed=seed)
    if name == "optuna-tpe":
        return optuna.samplers.TPESampler(seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--random-seeds", type=int, default=50)
    ap.add_argument("--budgets", default="25,50")
    ap.add_argument("--samplers", default="optuna-gp,optuna-tpe")
    ap.add_argument(
        "--problems",
        default="trap,fail",
        help="names, or `public` / `trap` / `fail` / `noisy` for all the public / trap / failure / "
        "noisy problems",
    )
    ap.add_argument("--q", type=int, default=1, help="outstanding asks (1: sequential)")
    ap.add_argument("--rand-med", action="append", default=[], metavar="NAME=V1,V2")
    a = ap.parse_args()
    budgets = [int(x) for x in a.budgets.split(",")]
    samplers = a.samplers.split(",")
    wanted = set()
    for w in a.problems.split(","):
        group = [p[0] for p in PROBLEMS if p[0].startswith(w + "_") or p[0].endswith("_" + w)]
        if w == "public":
            group = PUBLIC
        elif any(p[0] == w for p in PROBLEMS):
            group = [w]
        wanted.update(group or [w])
    given = {}
    for item in a.rand_med:
        k, _, vs = item.partition("=")
        given[k] = [float(x) for x in vs.split(",")]
        if len(given[k]) != len(budgets):
            sys.exit(f"--rand-med {k}: one value per budget")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    tmax = max(budgets)
    for name, space, f, opt in PROBLEMS:
        if name not in wanted:
            continue
        if name in given:
            rand_med, ref = given[name], "given"
        else:
            per = [[] for _ in budgets]
            for s in range(a.random_seeds):
                best, _ = run(
                    make("random", 1_000_000 + s), space, f, tmax, 1, NOISE.get(name, 0.0), s
                )
                for k, t in enumerate(budgets):
                    per[k].append(best[t - 1])
            rand_med = [statistics.median(v) for v in per]
            ref = f"Optuna RandomSampler, {a.random_seeds} seeds"
        print(f"\n### {name}\n")
        print(
            "random median best @"
            + "/".join(map(str, budgets))
            + ": "
            + " / ".join(f"{v:.4f}" for v in rand_med)
            + f" ({ref})\n"
        )
        cols = ["score", "worst", "below", "failed"]
        print("| sampler | q | " + " | ".join(f"{c}@{t}" for c in cols for t in budgets) + " |")
        print("|---|---|" + "---|" * (len(cols) * len(budgets)))
        for sname in samplers:
            per = [[] for _ in budgets]
            fl = [0.0] * len(budgets)
            for s in range(a.seeds):
                best, failed = run(make(sname, s), space, f, tmax, a.q, NOISE.get(name, 0.0), s)
                for k, t in enumerate(budgets):
                    per[k].append(score(best[t - 1], opt, rand_med[k]))
                    fl[k] += failed[t - 1] / a.seeds
            sc = [sum(v) / len(v) for v in per]
            worst = [min(v) for v in per]
            below = [sum(x < 0.0 for x in v) / len(v) for v in per]
            cells = [f"{x:.1f}" for x in sc + worst] + [f"{x:.2f}" for x in below]
            cells += [f"{x:.1f}" for x in fl]
            print(f"| {sname} | {a.q} | " + " | ".join(cells) + " |", flush=True)
            print(
                f"{name} {sname} q={a.q}: score {sc} worst {worst} below {below} failed {fl}",
                file=sys.stderr,
                flush=True,
            )

if __name__ == "__main__":
    main()
