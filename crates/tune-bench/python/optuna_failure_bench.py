#!/usr/bin/env python3
"""Optuna's side of the failure problems of `tune bench optimizers --problems fail` (issue 13):
Optuna's GPSampler and TPESampler on the same three problems, with a trial that fails (diverges,
runs out of memory, crashes) told as `TrialState.FAIL`, which is how an Optuna user sees a crash
(`study.optimize` does the same for an objective that raises, with `catch`).

    .venv/bin/python crates/tune-bench/python/optuna_failure_bench.py --seeds 10 --budgets 25,50

The formulas, spaces and constants are those of crates/tune-bench/src/problems.rs
(`fail_diverge`, `fail_oom`, `fail_crash`), and the figures are those of the Rust harness:
  - seeds 0 .. S-1 are the samplers' seeds (`seed=` of each sampler);
  - the score is 100 at the optimum and 0 at random search's median best after t trials,
    clipped to +-100; the reference is Optuna's RandomSampler with seeds 1 000 000 .. +R-1
    (the seeds tune's harness gives its own random search), or the medians given with
    `--rand-med NAME=V25,V50` (e.g. the ones tune's run printed, to score on one reference);
  - a run's best counts only trials that ran; "failed" is the mean number of FAIL trials among
    the first t.
Requires optuna (GPSampler also needs torch and scipy). Prints one Markdown table per problem.
"""

import argparse
import math
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


# name, space, formula, optimum (as in problems.rs)
PROBLEMS = [
    ("fail_diverge", space_diverge, fail_diverge, 0.08),
    ("fail_oom", space_oom, fail_oom, 0.1050047939192687),
    ("fail_crash", space_crash, fail_crash, 0.10618120229300967),
]


def run(sampler, space, f, budget):
    """Best value after each trial, and failed trials among the first t."""
    study = optuna.create_study(direction="minimize", sampler=sampler)
    best, failed, n_failed, b = [], [], 0, math.inf
    for _ in range(budget):
        trial = study.ask()
        v = f(space(trial))
        if math.isfinite(v):
            study.tell(trial, v)
            b = min(b, v)
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
    ap.add_argument("--problems", default=",".join(p[0] for p in PROBLEMS))
    ap.add_argument("--rand-med", action="append", default=[], metavar="NAME=V1,V2")
    a = ap.parse_args()
    budgets = [int(x) for x in a.budgets.split(",")]
    samplers = a.samplers.split(",")
    wanted = a.problems.split(",")
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
                best, _ = run(make("random", 1_000_000 + s), space, f, tmax)
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
        hdr = lambda w: " | ".join(f"{w}@{t}" for t in budgets)
        print(f"| sampler | {hdr('score')} | {hdr('failed')} |")
        print("|---|" + "---|" * (2 * len(budgets)))
        for sname in samplers:
            sc = [0.0] * len(budgets)
            fl = [0.0] * len(budgets)
            for s in range(a.seeds):
                best, failed = run(make(sname, s), space, f, tmax)
                for k, t in enumerate(budgets):
                    sc[k] += score(best[t - 1], opt, rand_med[k]) / a.seeds
                    fl[k] += failed[t - 1] / a.seeds
            cells = " | ".join(f"{x:.1f}" for x in sc) + " | " + " | ".join(f"{x:.1f}" for x in fl)
            print(f"| {sname} | {cells} |", flush=True)
            print(f"{name} {sname}: score {sc} failed {fl}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
