#!/usr/bin/env python3
"""A command trial that checkpoints and resumes (docs/command-trials.md, "Checkpoints and
attempts"): stdlib only, a few seconds per trial.

It "trains" for `--epochs` epochs a synthetic model whose validation loss falls with the epochs
towards a floor set by `--lr` and `--decay`. After every epoch it saves its state (the epoch,
the running loss and its random generator's state) to `$TUNE_CHECKPOINT_DIR/state.json`,
atomically: a temporary file, fsync, then a rename, so a kill at any instant leaves the old
checkpoint or the new one, never half of one. When tune runs an interrupted trial again
(`TUNE_ATTEMPT` > 1) the checkpoint directory is the same, so the script finds the state and
goes on after the saved epoch: the steps it reports never repeat. After each save it prints
`tune: {"checkpoint": true, "step": E}`, so that the resumed trial's curve starts with the
reports of the attempt it resumed from, up to its first own step: every epoch once.

On SIGTERM (a preemption, or a pause of promotion-based ASHA), it finishes the epoch it is in,
saves it and reports the checkpoint, then exits with status 143: the grace tune gives a
stopping trial is spent on keeping the work, not on losing it.

Each attempt appends one line to `$TUNE_CHECKPOINT_DIR/attempts.log`
(`attempt=A trial=N resumed_from=E`, E = -1 for a start from scratch), so what happened across
attempts can be read afterwards.
"""
import argparse
import json
import math
import os
import random
import signal
import sys
import time

# Set by SIGTERM: stop after the next checkpoint.
STOP = {"asked": False}


def on_term(signum, frame):
    STOP["asked"] = True


def save(path, state):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        # A damaged checkpoint: start again from scratch, and say so.
        print(f"cannot read the checkpoint {path} ({e}); starting from scratch", file=sys.stderr)
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--decay", type=float, required=True)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--epoch-seconds", type=float, default=0.15)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, on_term)

    ckpt_dir = os.environ.get("TUNE_CHECKPOINT_DIR", ".")
    attempt = int(os.environ.get("TUNE_ATTEMPT", "1"))
    trial = os.environ.get("TUNE_TRIAL", "?")
    os.makedirs(ckpt_dir, exist_ok=True)
    path = os.path.join(ckpt_dir, "state.json")

    state = load(path)
    if state is None:
        rng = random.Random(hash((args.lr, args.decay)) & 0xFFFFFFFF)
        state = {"epoch": -1, "loss": 2.0, "rng": None}
    else:
        rng = random.Random()
        rng.setstate(tuple(tuple(x) if isinstance(x, list) else x for x in state["rng"]))
    start = state["epoch"]
    with open(os.path.join(ckpt_dir, "attempts.log"), "a") as f:
        f.write(f"attempt={attempt} trial={trial} resumed_from={start}\n")
    if start >= 0:
        print(f"attempt {attempt}: resuming after epoch {start}", file=sys.stderr)

    floor = (math.log10(args.lr) + 1.0) ** 2 + args.decay
    loss = state["loss"]
    for epoch in range(start + 1, args.epochs):
        time.sleep(args.epoch_seconds)
        loss = floor + (loss - floor) * 0.6 + rng.uniform(0.0, 0.01)
        print(f'tune: {{"step": {epoch}, "val_loss": {loss:.6f}}}', flush=True)
        save(path, {"epoch": epoch, "loss": loss, "rng": rng.getstate()})
        # Tells tune the checkpoint holds everything up to this step: an attempt that resumes
        # from it keeps this attempt's reports up to here in its curve.
        print(f'tune: {{"checkpoint": true, "step": {epoch}}}', flush=True)
        if STOP["asked"]:
            print(f"SIGTERM: stopping after the checkpoint of epoch {epoch}", file=sys.stderr)
            sys.exit(143)


if __name__ == "__main__":
    main()
