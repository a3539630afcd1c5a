"""Optuna's side of `tune-bench multi` (issue 13): the same problems, reference points, seeds
and budgets with Optuna's NSGAIISampler, TPESampler and GPSampler, printing the same table.

Hypervolume is computed as tune's `pareto::hypervolume` does (exact: points strictly inside the
reference, their Pareto front, a sweep in 2-D and slicing along the last objective above), on
every complete trial so far. "% of front" divides the mean by the true front's hypervolume
(ZDT1, ZDT2, DTLZ2) or by the front of tune's grid of the `train` space (the figure tune-bench
prints; pass it with --train-front-hv). ms/ask is the time of `study.ask()` plus the
`suggest_*` calls, where Optuna's samplers do their work.

Usage:
  .venv/bin/python crates/tune-bench/python/optuna_multi_bench.py \
      --samplers nsga2,tpe,gp --seeds 10 --budgets 25,50 --q 1
"""

import argparse
import math
import sys
import time

import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)


def zdt_g(x):
    return 1.0 + 9.0 * sum(x[1:]) / 5.0


def zdt1(x):
    g = zdt_g(x)
    return [x[0], g * (1.0 - math.sqrt(x[0] / g))]


def zdt2(x):
    g = zdt_g(x)
    return [x[0], g * (1.0 - (x[0] / g) ** 2)]


def dtlz2(x):
    g = sum((v - 0.5) ** 2 for v in x[2:])
    a, b = x[0] * math.pi / 2, x[1] * math.pi / 2
    return [
        (1 + g) * math.cos(a) * math.cos(b),
        (1 + g) * math.cos(a) * math.sin(b),
        (1 + g) * math.sin(a),
    ]


TRAIN_N = 50_000.0


def train(p):
    """The same formula as tune-bench's `multi::train`."""
    lr, batch, width, epochs = p["lr"], float(p["batch_size"]), float(p["width"]), float(p["epochs"])
    steps_per_epoch = TRAIN_N / batch
    floor = 0.2 + 0.6 * (32.0 / width) ** 0.7
    noise = 0.08 * math.sqrt(16.0 / batch)
    best_lr = 3e-3 * math.sqrt(batch / 64.0)
    lr_pen = 0.1 * math.log10(lr / best_lr) ** 2
    needed = 2000.0 * (width / 32.0) ** 0.3
    undertrained = 0.6 * math.exp(-(epochs * steps_per_epoch) / needed)
    seconds_per_epoch = steps_per_epoch * (0.005 + 4e-9 * batch * width * width)
    return [floor + noise + lr_pen + undertrained, epochs * seconds_per_epoch]


def cube6(trial):
    return [trial.suggest_float(f"x{i}", 0.0, 1.0) for i in range(6)]


def train_space(trial):
    return {
        "lr": trial.suggest_float("lr", 1e-4, 1e-1, log=True),
        "batch_size": trial.suggest_int("batch_size", 16, 512, log=True),
        "width": trial.suggest_int("width", 32, 1024, log=True),
        "epochs": trial.suggest_int("epochs", 1, 20),
    }


def as_is(v):
    return list(v)


def log_seconds(v):
    return [v[0], math.log10(v[1])]


# name, objectives, reference, true-front hypervolume (None: tune's grid front), suggest, f,
# the objectives as hypervolume measures them (train: seconds in log10)
PROBLEMS = [
    ("zdt1", 2, [11.0, 11.0], 120.0 + 2.0 / 3.0, cube6, zdt1, as_is),
    ("zdt2", 2, [11.0, 11.0], 120.0 + 1.0 / 3.0, cube6, zdt2, as_is),
    ("dtlz2", 3, [1.1, 1.1, 1.1], 1.331 - math.pi / 6.0, cube6, dtlz2, as_is),
    ("train", 2, [1.0, 3.0], None, train_space, train, log_seconds),
]


def dominates(a, b):
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


def front(points):
    return [p for p in points if not any(dominates(q, p) for q in points)]


def hv(points, ref):
    if not points:
        return 0.0
    k = len(ref)
    if k == 1:
        return ref[0] - min(p[0] for p in points)
    if k == 2:
        area, best_y = 0.0, ref[1]
        for p in sorted(points):
            if p[1] < best_y:
                area += (ref[0] - p[0]) * (best_y - p[1])
                best_y = p[1]
        return area
    pts = sorted(points, key=lambda p: p[k - 1])
    vol, i = 0.0, 0
    while i < len(pts):
        z = pts[i][k - 1]
        while i < len(pts) and pts[i][k - 1] <= z:
            i += 1
        top = pts[i][k - 1] if i < len(pts) else ref[k - 1]
        sl = front([p[: k - 1] for p in pts[:i]])
        vol += hv(sl, ref[: k - 1]) * (top - z)
    return vol


def hypervolume(points, ref):
    inside = [p for p in points if all(x < r for x, r in zip(p, ref))]
    return hv(front(inside), ref)


def make_sampler(name, seed):
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if name.startswith("nsga2-p"):
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=int(name[7:]))
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise SystemExit(f"unknown sampler {name!r}")


def run(problem, sampler_name, seed, budget, q):
    _, k, ref, _, suggest, f, measured = problem
    study = optuna.create_study(
        directions=["minimize"] * k, sampler=make_sampler(sampler_name, seed)
    )
    pending, done, hvs, ms = [], [], [], []
    asked = 0
    while len(done) < budget:
        while len(pending) < max(q, 1) and asked < budget:
            t0 = time.perf_counter()
            trial = study.ask()
            params = suggest(trial)
            ms.append((time.perf_counter() - t0) * 1e3)
            pending.append((trial, params))
            asked += 1
        trial, params = pending.pop(0)
        values = f(params)
        study.tell(trial, values)
        done.append(measured(values))
        hvs.append(hypervolume(done, ref))
    return hvs, ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samplers", default="nsga2,tpe,gp")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--budgets", default="25,50")
    ap.add_argument("--q", type=int, default=1)
    ap.add_argument("--problems", default="zdt1,zdt2,dtlz2,train")
    ap.add_argument("--train-front-hv", type=float, default=None)
    args = ap.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    names = args.problems.split(",")
    for problem in PROBLEMS:
        if problem[0] not in names:
            continue
        name, k, ref, true_hv = problem[:4]
        if true_hv is None:
            true_hv = args.train_front_hv or float("nan")
        print(
            f"\n#### {name} ({k} objectives, reference {ref}, front HV {true_hv:.4f}; "
            f"q = {args.q})\n"
        )
        head = " | ".join(f"HV@{b} mean | worst | % of front" for b in budgets)
        print(f"| sampler | {head} | ms/ask |")
        print("|---|" + "---|---|---|" * len(budgets) + "---|")
        for s in args.samplers.split(","):
            at = [[] for _ in budgets]
            all_ms = []
            for seed in range(args.seeds):
                hvs, ms = run(problem, s, seed, max(budgets), args.q)
                for j, b in enumerate(budgets):
                    at[j].append(hvs[b - 1])
                all_ms.extend(ms)
            cells = []
            for v in at:
                mean = sum(v) / len(v)
                cells.append(f"{mean:.4f} | {min(v):.4f} | {100 * mean / true_hv:.2f}")
            print(f"| optuna-{s} | {' | '.join(cells)} | {sum(all_ms) / len(all_ms):.2f} |")
            sys.stdout.flush()
            print(f"{name} {s} done", file=sys.stderr)


if __name__ == "__main__":
    main()
