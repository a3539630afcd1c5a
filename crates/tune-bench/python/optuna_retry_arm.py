"""The Optuna arms of `tune bench preemption` (crates/tune-bench/src/preemption_optuna.rs):
Optuna's documented way to survive a killed worker, on the trials and the model of the tune
arms. An RDBStorage on SQLite with a heartbeat; a trial whose worker died goes stale after
`grace_period`, is failed, and the retry callback (RetryHeartbeatStaleTrialCallback, which
Optuna 4.9 renamed from RetryFailedTrialCallback; the older name where it is the only one)
enqueues it again, to train from scratch.

The objective trains what the builtin trainer trains for the study file of the tune arms
(src/builtin, crates/tune-train): the MLP of the trainer benchmark's eager PyTorch
(crates/tune-train/benches/torch_baseline.py, reused here) with a dropout after each ReLU, on
the first `--limit` Fashion-MNIST training images standardised by their own scalar mean and
std, Adam (no weight decay), a cosine learning rate per step from the enqueued `lr` to 0 (no
warm-up), the batch size's whole batches each epoch in a seeded shuffle, the 10 000 test
images as the validation set; one thread, as each tune-worker. After each epoch it appends
`epoch TRIAL_INDEX EPOCH VAL_LOSS` to `--log`: the harness counts those lines as epochs
trained and places its kills by them.

Three commands, each run by the harness:
  setup    creates the study and enqueues the params (one JSON object per line of --params)
  work     one worker: trains waiting trials until every enqueued trial is complete
  summary  prints `complete INDEX VALUE` per complete trial
"""
import argparse
import json
import math
import os
import sys
import time
import warnings

import optuna

# The trainer benchmark's model and IDX reader: one definition of "the same model".
REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
sys.path.insert(0, os.path.join(REPO, "crates", "tune-train", "benches"))

STUDY = "preemption"
# Optuna's heartbeat: a trial with no beat for GRACE_S seconds is stale. Short, so that the
# arm is not charged for a long wait the user could have chosen shorter; Optuna requires the
# grace to exceed the interval.
HEARTBEAT_S = 1
GRACE_S = 3
# A worker killed between taking a trial (RUNNING) and its heartbeat thread's first beat leaves
# a trial with no heartbeat at all, which Optuna never counts stale (`_get_stale_trial_ids`
# skips it): the study would wait for it forever. An operator would fail it by hand; the idle
# workers do it once it is this old, far past the milliseconds between the two.
ORPHAN_S = 10


def storage(url):
    retry = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None)
    if retry is None:
        retry = optuna.storages.RetryFailedTrialCallback
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return optuna.storages.RDBStorage(
            url,
            heartbeat_interval=HEARTBEAT_S,
            grace_period=GRACE_S,
            failed_trial_callback=retry(max_retry=10_000),
            # Two workers and their heartbeat threads write one SQLite file.
            engine_kwargs={"connect_args": {"timeout": 120}},
        )


def fail_orphans(study, st):
    """Fails the RUNNING trials that never beat and runs the retry callback on them, as
    `fail_stale_trials` does for the stale ones; returns how many."""
    import copy
    import datetime

    import sqlalchemy

    with st.engine.connect() as c:
        beating = {r[0] for r in c.execute(sqlalchemy.text("SELECT trial_id FROM trial_heartbeats"))}
    now = datetime.datetime.now()
    n = 0
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        if t._trial_id in beating or t.datetime_start is None:
            continue
        if (now - t.datetime_start).total_seconds() < ORPHAN_S:
            continue
        try:
            if not st.set_trial_state_values(t._trial_id, state=optuna.trial.TrialState.FAIL):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue
        st.get_heartbeat_stale_trial_callback()(study, copy.deepcopy(st.get_trial(t._trial_id)))
        print(f"failed trial {t.number}: RUNNING with no heartbeat", file=sys.stderr, flush=True)
        n += 1
    return n


def setup(a):
    study = optuna.create_study(
        storage=storage(a.storage),
        study_name=STUDY,
        direction="minimize",
        sampler=optuna.samplers.RandomSampler(seed=a.seed),
    )
    with open(a.params) as f:
        for i, line in enumerate(l for l in f if l.strip()):
            study.enqueue_trial(json.loads(line), user_attrs={"bench_index": i})


def load(data, limit):
    import numpy as np
    import torch
    from torch_baseline import idx

    x = idx(os.path.join(data, "train-images-idx3-ubyte.gz"))[:limit]
    y = idx(os.path.join(data, "train-labels-idx1-ubyte.gz"))[:limit]
    vx = idx(os.path.join(data, "t10k-images-idx3-ubyte.gz"))
    vy = idx(os.path.join(data, "t10k-labels-idx1-ubyte.gz"))
    x = torch.tensor(x.astype(np.float32) / 255.0).unsqueeze(1)
    vx = torch.tensor(vx.astype(np.float32) / 255.0).unsqueeze(1)
    # tune's `standardise`: the training split's scalar mean and (unbiased) std, for both.
    mean, std = x.mean(), x.std().clamp_min(1e-6)
    return (
        ((x - mean) / std).contiguous(),
        torch.tensor(y.astype(np.int64)),
        ((vx - mean) / std).contiguous(),
        torch.tensor(vy.astype(np.int64)),
    )


def model(dropout, width, depth):
    import torch.nn as nn
    from torch_baseline import mlp

    layers = []
    for layer in mlp((1, 28, 28), width, depth, 10):
        layers.append(layer)
        if isinstance(layer, nn.ReLU) and dropout > 0.0:
            layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers)


def work(a):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    x, y, vx, vy = load(a.data, a.limit)
    n = x.shape[0]

    def objective(trial):
        index = trial.user_attrs.get("bench_index")
        if index is None:
            # Another worker took the last waiting trial between our look and our ask: the
            # sampler's own trial is not one of the bench's, and costs nothing.
            raise optuna.TrialPruned()
        lr = trial.suggest_float("lr", 1e-4, 1e-2, log=True)
        batch = trial.suggest_categorical("batch_size", [64, 128])
        dropout = trial.suggest_float("dropout", 0.0, 0.2)
        # Every attempt of a trial starts from the same seed: a retry is the same training.
        torch.manual_seed(a.seed * 1_000_003 + index)
        g = torch.Generator().manual_seed(a.seed * 1_000_003 + index)
        net = model(dropout, a.width, a.depth)
        opt = torch.optim.Adam(net.parameters(), lr=lr)
        per_epoch = n // batch
        total = a.epochs * per_epoch
        step = 0
        val_loss = float("nan")
        for epoch in range(1, a.epochs + 1):
            net.train()
            perm = torch.randperm(n, generator=g)
            for b in range(per_epoch):
                for group in opt.param_groups:
                    group["lr"] = lr * 0.5 * (1.0 + math.cos(math.pi * step / total))
                rows = perm[b * batch : (b + 1) * batch]
                loss = F.cross_entropy(net(x[rows]), y[rows])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                step += 1
            net.eval()
            with torch.no_grad():
                val_loss = sum(
                    F.cross_entropy(net(vx[i : i + 1024]), vy[i : i + 1024], reduction="sum").item()
                    for i in range(0, vx.shape[0], 1024)
                ) / vx.shape[0]
            # One write of one whole line in append mode: a kill leaves whole lines.
            with open(a.log, "a") as f:
                f.write(f"epoch {index} {epoch} {val_loss!r}\n")
            trial.report(val_loss, epoch)
        return val_loss

    st = storage(a.storage)
    study = optuna.load_study(study_name=STUDY, storage=st)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        while True:
            # Optuna fails stale trials (and so re-enqueues them) only when a worker starts a
            # trial; an idle worker must do it itself, or the last retries never come.
            optuna.storages.fail_stale_trials(study)
            trials = study.get_trials(deepcopy=False)
            done = {
                t.user_attrs["bench_index"]
                for t in trials
                if t.state == optuna.trial.TrialState.COMPLETE and "bench_index" in t.user_attrs
            }
            if len(done) >= a.trials:
                return
            if any(t.state == optuna.trial.TrialState.WAITING for t in trials):
                try:
                    study.optimize(objective, n_trials=1)
                except ValueError as e:
                    # On SQLite two workers can pop the same waiting trial (the row lock
                    # of the pop is a no-op there): both train it, the second's tell is
                    # refused. Its epochs were trained all the same, and stay counted.
                    if "Cannot tell" not in str(e):
                        raise
                    print(f"trained a trial another worker had: {e}", file=sys.stderr, flush=True)
            elif fail_orphans(study, st) == 0:
                time.sleep(0.2)


def summary(a):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=STUDY, storage=a.storage)
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if "bench_index" in t.user_attrs:
            print(f"complete {t.user_attrs['bench_index']} {t.value!r}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=["setup", "work", "summary"])
    p.add_argument("--storage", required=True, help="sqlite:///PATH")
    p.add_argument("--params", help="setup: one JSON object of params per line")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", help="the Fashion-MNIST directory")
    p.add_argument("--limit", type=int, default=4000)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--trials", type=int, default=1)
    p.add_argument("--log", help="work: the epoch log")
    a = p.parse_args()
    {"setup": setup, "work": work, "summary": summary}[a.command](a)


if __name__ == "__main__":
    main()
