#!/usr/bin/env python3
"""A real training script tuned by `tune` as a command trial (docs/command-trials.md).

Softmax regression on the 1 797 handwritten digits vendored in datasets/, trained by
mini-batch SGD with momentum and L2 decay in plain Python (no third-party packages), reporting
validation loss and accuracy every epoch with `tune: {json}` lines.
"""
import argparse
import gzip
import json
import math
import os
import random


def load(path):
    rows = []
    with gzip.open(path, "rt") as f:
        for line in f:
            vals = [float(v) for v in line.strip().split(",")]
            rows.append(([v / 16.0 for v in vals[:64]], int(vals[64])))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--l2", type=float, default=0.0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "datasets", "digits.csv.gz"))
    args = ap.parse_args()

    seed = int(os.environ.get("TUNE_TRIAL", "0"))
    rng = random.Random(1234)  # the split is fixed for every trial
    data = load(args.data)
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
