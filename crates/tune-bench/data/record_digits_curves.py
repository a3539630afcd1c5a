#!/usr/bin/env python3
"""Record the `digits-mlp` table of real learning curves (issue 26).

What it does: writes one builtin study per trainer seed (a grid of the digits MLP given as
categorical parameters, every grid point queued with `[[enqueue]]`, `[pruner] kind = "none"`,
one CPU worker), runs each with the REAL trainer (`tune run --no-tui`, the studies side by
side, each worker single-threaded: OMP_NUM_THREADS=1, niced), then reads every trial's
per-epoch `val_loss` from the study's SQLite database (tune's `tune_reports` table) and writes
`digits_mlp_curves.csv` beside this file: one row per (configuration, seed) with the grid
params and the validation loss after every epoch (`e1` .. `eN`).

Re-record (about 5-10 minutes on 2 busy cores):
    LD_LIBRARY_PATH=<torch's CUDA libs if libtorch is a CUDA build> \
    python3 crates/tune-bench/data/record_digits_curves.py --tune target/debug/tune
The `tune` binary finds `tune-worker` beside itself. Only the standard library is used.
The header of the CSV records the grid, the commit, the machine and the date of the recording.
"""

import argparse
import csv
import datetime
import itertools
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# The grid: every key a knob of the builtin trainer (docs/study-file.md).
GRID = {
    "lr": [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1],
    "optimizer": ["sgd", "adam"],
    "batch_size": [32, 128],
    "width": [16, 64],
    "dropout": [0.0, 0.3],
}
EPOCHS = 20
SEEDS = [0, 1]


def toml_value(v):
    return json.dumps(v)


def study_toml(seed, db):
    lines = [
        "[study]",
        f'name = "digits-mlp-curves-s{seed}"',
        'metric = "val_loss"',
        'direction = "minimize"',
        f"trials = {len(list(itertools.product(*GRID.values())))}",
        f"seed = {seed}",
        f'storage = "sqlite:///{db}"',
        "",
        "[space]",
    ]
    for k, vs in GRID.items():
        lines.append(f'{k} = {{ type = "categorical", choices = {json.dumps(vs)} }}')
    lines += [
        "",
        "[pruner]",
        'kind = "none"',
        "",
        "[workers]",
        "count = 1",
        'devices = ["cpu"]',
        "",
        "[trial]",
        'kind = "builtin"',
        f"epochs = {EPOCHS}",
        "",
        "[trial.model]",
        'kind = "mlp"',
        "depth = 1",
        "",
        "[trial.data]",
        'dataset = "digits"',
    ]
    for combo in itertools.product(*GRID.values()):
        lines.append("")
        lines.append("[[enqueue]]")
        for k, v in zip(GRID.keys(), combo):
            lines.append(f"{k} = {toml_value(v)}")
    return "\n".join(lines) + "\n"


def read_curves(db):
    con = sqlite3.connect(db)
    rows = []
    trials = con.execute("SELECT trial_id, state FROM trials ORDER BY number").fetchall()
    for trial_id, state in trials:
        if state not in ("COMPLETE", "FAIL"):
            sys.exit(f"{db}: trial {trial_id} is {state}; every grid point must have run")
        params = {}
        for name, value, dist in con.execute(
            "SELECT param_name, param_value, distribution_json FROM trial_params WHERE trial_id = ?",
            (trial_id,),
        ):
            choices = json.loads(dist)["attributes"]["choices"]
            params[name] = choices[int(value)]
        curve = {}
        for (metrics,) in con.execute(
            "SELECT metrics_json FROM tune_reports WHERE trial_id = ? ORDER BY seq", (trial_id,)
        ):
            m = json.loads(metrics)
            if "epoch" in m and "val_loss" in m:
                curve[int(round(m["epoch"]))] = m["val_loss"]
        # A trial that failed (its loss became NaN: the trainer stops there) keeps the epochs
        # it reported and is NaN from then on, as a diverged run of the simulated problems.
        if sorted(curve) != list(range(1, len(curve) + 1)) or (state == "COMPLETE" and len(curve) != EPOCHS):
            sys.exit(f"{db}: trial {trial_id} ({state}) reported epochs {sorted(curve)}, not 1..{EPOCHS}")
        rows.append((params, [curve.get(e, float("nan")) for e in range(1, EPOCHS + 1)]))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tune", required=True, help="path of the tune binary")
    ap.add_argument("--out", default=os.path.join(HERE, "digits_mlp_curves.csv"))
    ap.add_argument("--minutes", type=float, help="with --from: the minutes the recording took")
    ap.add_argument("--from", dest="source", help="only read the databases of an earlier run's directory")
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    work = args.source or tempfile.mkdtemp(prefix="digits-curves-")
    procs = []
    started = datetime.datetime.now(datetime.timezone.utc)
    for seed in SEEDS if args.source is None else []:
        db = os.path.join(work, f"s{seed}.db")
        path = os.path.join(work, f"s{seed}.toml")
        with open(path, "w") as f:
            f.write(study_toml(seed, db))
        log = open(os.path.join(work, f"s{seed}.log"), "w")
        procs.append((seed, db, subprocess.Popen(
            ["nice", "-n", "5", args.tune, "run", "--no-tui", path],
            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work)))
    for seed, db, p in procs:
        if p is not None and p.wait() != 0:
            sys.exit(f"tune run of seed {seed} failed; see {work}/s{seed}.log")
    if args.source is not None:
        procs = [(seed, os.path.join(work, f"s{seed}.db"), None) for seed in SEEDS]
    minutes = args.minutes if args.source is not None else (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds() / 60
    try:
        commit = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    with open(args.out, "w", newline="") as f:
        f.write(f"# digits-mlp real learning curves (issue 26): val_loss after every epoch of the builtin\n")
        f.write(f"# digits MLP (depth 1), {len(SEEDS)} trainer seeds per grid point, grid {json.dumps(GRID)}.\n")
        f.write(f"# Recorded by crates/tune-bench/data/record_digits_curves.py at commit {commit} on\n")
        f.write(f"# {started:%Y-%m-%d} ({cpu}, {os.cpu_count()} cores, shared; {minutes or 0:.1f} min), debug build, CPU, 1 thread.\n")
        w = csv.writer(f, lineterminator="\n")
        w.writerow(list(GRID) + ["seed"] + [f"e{e}" for e in range(1, EPOCHS + 1)])
        for seed, db, _ in procs:
            for params, curve in read_curves(db):
                w.writerow([params[k] for k in GRID] + [seed] + [f"{v:.6g}" if v == v else "nan" for v in curve])
    print(f"wrote {args.out} in {minutes:.1f} min (studies in {work})")


if __name__ == "__main__":
    main()
