#!/usr/bin/env python3
"""The other side of the GPU check's study throughput: Optuna driving an eager PyTorch training
script, as an Optuna user writes it, on the quickstart's space and model (scripts/gpu/check.py).

Each trial trains a 2-hidden-layer MLP on Fashion-MNIST for --epochs with the sampled lr,
optimizer (sgd with momentum, adam, adamw), width, batch size, gradient accumulation, bf16
autocast or fp32 and dropout, a cosine schedule with 5 % warm-up, and returns the validation loss
on the 10 000 test images. The data is read once and kept on the device (as tune's trainer keeps
a training set that fits). Prints one JSON line: trials finished and complete, the best value,
the wall time of the optimisation.
"""

import argparse
import gzip
import json
import math
import pathlib
import time

import optuna
import torch
import torch.nn.functional as F


def idx(path):
    raw = gzip.open(path).read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
    return torch.frombuffer(bytearray(raw[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def load(d, device):
    d = pathlib.Path(d)
    x = idx(d / "train-images-idx3-ubyte.gz").reshape(-1, 784).float() / 255
    y = idx(d / "train-labels-idx1-ubyte.gz").long()
    vx = idx(d / "t10k-images-idx3-ubyte.gz").reshape(-1, 784).float() / 255
    vy = idx(d / "t10k-labels-idx1-ubyte.gz").long()
    mean, std = x.mean(), x.std()
    return [t.to(device) for t in ((x - mean) / std, y, (vx - mean) / std, vy)]


def objective(trial, data, device, epochs):
    x, y, vx, vy = data
    lr = trial.suggest_float("lr", 1e-5, 1.0, log=True)
    opt_name = trial.suggest_categorical("optimizer", ["sgd", "adam", "adamw"])
    momentum = trial.suggest_float("momentum", 0.0, 0.95) if opt_name == "sgd" else 0.0
    width = trial.suggest_categorical("width", [64, 128, 256])
    batch = trial.suggest_categorical("batch_size", [64, 128, 256])
    accumulation = trial.suggest_int("accumulation", 1, 4, log=True)
    amp = trial.suggest_categorical("amp", ["bf16", "off"])
    dropout = trial.suggest_float("dropout", 0.0, 0.3)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, width), torch.nn.ReLU(), torch.nn.Dropout(dropout),
        torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Dropout(dropout),
        torch.nn.Linear(width, 10)).to(device)
    if opt_name == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    elif opt_name == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=lr, foreach=True)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=lr, foreach=True)
    n = x.shape[0]
    steps_per_epoch = max(1, n // (batch * accumulation))
    total = steps_per_epoch * epochs
    warm = max(1, int(0.05 * total))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, total - warm))))
    ac = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=(amp == "bf16"))
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(n, device=device)
        for s in range(steps_per_epoch):
            for a in range(accumulation):
                i = perm[(s * accumulation + a) * batch:(s * accumulation + a + 1) * batch]
                with ac:
                    loss = F.cross_entropy(model(x[i]), y[i]) / accumulation
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            sched.step()
    model.eval()
    total_loss = 0.0
    with torch.no_grad(), ac:
        for j in range(0, vx.shape[0], 1024):
            total_loss += F.cross_entropy(model(vx[j:j + 1024]).float(), vy[j:j + 1024], reduction="sum").item()
    value = total_loss / vx.shape[0]
    if not math.isfinite(value):
        raise ValueError("diverged")
    return value


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--n-jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("--trials", type=int, default=None)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="cuda:0")
    a = ap.parse_args()
    t0 = time.time()
    device = torch.device(a.device)
    data = load(a.data, device)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.RandomSampler(seed=a.seed))
    study.optimize(lambda t: objective(t, data, device, a.epochs), n_trials=a.trials, timeout=a.timeout,
                   n_jobs=a.n_jobs, catch=(ValueError, RuntimeError),
                   # one line a trial, so that a run killed past its time still says what it did
                   callbacks=[lambda s, t: print(json.dumps({"trial": t.number, "state": t.state.name}), flush=True)])
    states = [t.state for t in study.trials]
    complete = sum(1 for s in states if s == optuna.trial.TrialState.COMPLETE)
    failed = sum(1 for s in states if s == optuna.trial.TrialState.FAIL)
    best = min((t.value for t in study.trials if t.value is not None), default=None)
    print(json.dumps({"finished": complete + failed, "complete": complete, "failed": failed, "best": best,
                      "seconds": round(time.time() - t0, 1), "n_jobs": a.n_jobs}))


if __name__ == "__main__":
    main()
