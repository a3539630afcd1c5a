#!/usr/bin/env python3
"""A real training script tuned by `tune` as a command trial (docs/command-trials.md).

Softmax regression on 1 797 handwritten 8x8 digits, trained by mini-batch SGD with momentum and
L2 decay in plain Python (no third-party packages), reporting validation loss and accuracy every
epoch with `tune: {json}` lines.

The data (`digits.csv.gz`: 64 pixel columns in 0..16, then the label) is looked for in this
order: `--data PATH`, `$DIGITS_DATA`, beside this script, in `../datasets/` beside it (the
repository's copy), and in an installed scikit-learn (`sklearn/datasets/data/`). `--check` only
looks for it: the study file runs that once before any trial (`[trial] check`), so a copy of
the study without the data stops at once and says where it looked.
"""
import argparse
import gzip
import json
import math
import os
import random
import sys


def candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("DIGITS_DATA"):
        yield os.environ["DIGITS_DATA"]
    yield os.path.join(here, "digits.csv.gz")
    yield os.path.join(here, "..", "datasets", "digits.csv.gz")
    try:
        import importlib.util

        spec = importlib.util.find_spec("sklearn")
        if spec and spec.submodule_search_locations:
            for root in spec.submodule_search_locations:
                yield os.path.join(root, "datasets", "data", "digits.csv.gz")
    except (ImportError, ValueError):
        pass


def find_data(given):
    if given:
        if os.path.isfile(given):
            return given
        sys.exit(f"digits_softmax.py: --data {given}: no such file")
    tried = []
    for path in candidates():
        if os.path.isfile(path):
            return path
        tried.append(os.path.normpath(path))
    sys.exit(
        "digits_softmax.py: digits.csv.gz not found; looked in: "
        + ", ".join(tried)
        + ". Put it beside this script, set DIGITS_DATA, or pass --data PATH"
    )


def load(path):
    rows = []
    with gzip.open(path, "rt") as f:
        for line in f:
            vals = [float(v) for v in line.strip().split(",")]
            rows.append(([v / 16.0 for v in vals[:64]], int(vals[64])))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--l2", type=float, default=0.0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--data", help="digits.csv.gz (default: looked for, see above)")
    ap.add_argument("--check", action="store_true", help="only check that the data is there")
    args = ap.parse_args()
    path = find_data(args.data)
    if args.check:
        print(f"digits_softmax.py: data in {path}")
        return
    if args.lr is None:
        ap.error("--lr is required")

    seed = int(os.environ.get("TUNE_TRIAL", "0"))
    rng = random.Random(1234)  # the split is fixed for every trial
    data = load(path)
    rng.shuffle(data)
    n_val = len(data) // 5
    val, train = data[:n_val], data[n_val:]
    rng = random.Random(seed)

    k, d = 10, 64
    w = [[0.0] * (d + 1) for _ in range(k)]
    vel = [[0.0] * (d + 1) for _ in range(k)]

    def probs(x):
        z = [sum(wi[j] * x[j] for j in range(d)) + wi[d] for wi in w]
        m = max(z)
        e = [math.exp(v - m) for v in z]
        s = sum(e)
        return [v / s for v in e]

    for epoch in range(1, args.epochs + 1):
        rng.shuffle(train)
        for b in range(0, len(train), args.batch):
            batch = train[b : b + args.batch]
            grad = [[0.0] * (d + 1) for _ in range(k)]
            for x, y in batch:
                p = probs(x)
                for c in range(k):
                    g = p[c] - (1.0 if c == y else 0.0)
                    gc = grad[c]
                    for j in range(d):
                        gc[j] += g * x[j]
                    gc[d] += g
            scale = 1.0 / len(batch)
            for c in range(k):
                for j in range(d + 1):
                    g = grad[c][j] * scale + args.l2 * w[c][j]
                    vel[c][j] = args.momentum * vel[c][j] + g
                    w[c][j] -= args.lr * vel[c][j]
        loss, correct = 0.0, 0
        for x, y in val:
            p = probs(x)
            loss -= math.log(max(p[y], 1e-12))
            correct += max(range(k), key=lambda c: p[c]) == y
        loss /= len(val)
        if not math.isfinite(loss):
            print("diverged", flush=True)
            raise SystemExit(3)
        print("tune: " + json.dumps({"step": epoch, "val_loss": loss, "val_acc": correct / len(val)}), flush=True)


if __name__ == "__main__":
    main()
