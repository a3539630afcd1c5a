#!/usr/bin/env python3
"""Other optimizers on tune's learning-curve problems (issue 26), side by side in one run, with
the accounting of `tune bench multifidelity`.

    scripts/setup.sh --mfbench          # .venv-mfbench with crates/tune-bench/python/requirements-mfbench.txt
    OMP_NUM_THREADS=1 .venv-mfbench/bin/python crates/tune-bench/python/multifidelity_bench.py \\
        --tune-bench target/release/tune-bench --seeds 3 --budgets 10,30

The problems have ONE source of truth: the `tune-bench` binary. This script asks it for the
problems (`tune-bench multifidelity --list`: names, epochs, spaces, optima and random search's
median final loss without pruning at each budget, over the same reference seeds as tune's own
run) and evaluates every epoch through a pipe (`tune-bench multifidelity --serve`: the reported
loss at that epoch, noise included, and the true final loss). No formula is ported here.

Accounting, as tune's harness does it:
  - every epoch trained costs 1; a run stops when it has spent its largest budget
    (budgets in full-trial equivalents: budget x the problem's epochs);
  - a trial that continues (Optuna's pruners, Syne Tune's stopping schedulers) pays only for
    the epochs it trains; an optimizer
    that evaluates a configuration at a fidelity from scratch (DEHB, SMAC) pays that many
    epochs for each evaluation (neither resumes a run);
  - at each budget, the measure is the TRUE final loss of the complete trial (one trained to
    the last epoch) whose REPORTED final loss is the best so far; none complete: chance (the
    `chance` value of the list, 2.3);
  - score: 100 at the problem's optimum, 0 at random search's median at the same compute,
    clipped to +-100; the table gives the mean over problems and seeds, and the worst seed
    (the lowest, over seeds, of that seed's mean over problems);
  - a loss that is not a number (a diverged run) fails the trial;
  - seeds 0 .. S-1 seed each optimizer (and pick the recorded run of a recorded problem).

Methods (--methods, comma list; default all that import):
  optuna-tpe-hyperband   Optuna TPESampler + HyperbandPruner(min_resource=1, max_resource=epochs,
                         reduction_factor=3)
  optuna-tpe-sha         Optuna TPESampler + SuccessiveHalvingPruner(min_resource=1,
                         reduction_factor=3)
  optuna-gp-median       Optuna GPSampler + MedianPruner() (GPSampler needs torch: the venv's, else
                         the checkout's .libtorch + .venv/bench of `scripts/setup.sh --bench`,
                         through a re-exec with LD_LIBRARY_PATH; see --torch-root)
  dehb                   DEHB (`dehb`), min fidelity 1, max fidelity epochs, eta 3, one worker
  smac-mf                SMAC3's MultiFidelityFacade (Hyperband intensifier, eta 3)
  syne-asha              Syne Tune 0.13 ASHA        } HyperbandScheduler, type="stopping",
  syne-mobster           Syne Tune 0.13 MOBSTER     } grace period 1, reduction factor 3,
  syne-hypertune         Syne Tune 0.13 Hyper-Tune  } max_t = epochs (Hyper-Tune: every bracket)
                         driven ask/tell (suggest, on_trial_add, on_trial_result per epoch,
                         on_trial_complete / on_trial_remove / on_trial_error), one worker, no
                         backend processes; a trial continues until the scheduler stops it.

Seconds per run vary by far more than the methods' figures: on the shared 2-core machine one run
at budget 10 took about 1 s (Optuna GP, TPE, DEHB, ASHA), 15 s (SMAC) and 30-420 s (MOBSTER,
Hyper-Tune); Optuna GP + MedianPruner at budget 30 took 719 s for one run (525 trials, most
pruned at their first epoch, each ask refitting the GP). --progress keeps the runs of a long call
that is cut short; --from-progress prints their table.

What installs (2026-11-27, Python 3.11, x86-64 Linux, pip from PyPI, `scripts/setup.sh
--mfbench`): Optuna 5.0.0, DEHB 0.1.2, SMAC 2.4.1 (its random forest is scikit-learn's since
2.4: no pyrfr, SWIG or C++ build), Syne Tune 0.13.0 with autograd (0.14 and later have no
MOBSTER or Hyper-Tune), numpy 1.26 (DEHB and Syne Tune 0.13 require numpy < 2). Not from PyPI:
torch, whose Linux wheel there is the CUDA build with several GB of NVIDIA wheels and which has
no CPU-only build on PyPI; the checkout's torch 2.13.0 of `setup.sh --bench` serves instead.
A method whose import fails is named on standard error and left out of the table.
"""

import argparse
import concurrent.futures
import json
import math
import os
import statistics
import subprocess
import sys
import time


class Exhausted(Exception):
    """The run has spent its largest budget."""


class Server:
    """`tune-bench multifidelity --serve` behind a pipe."""

    def __init__(self, binary, problems):
        self.p = subprocess.Popen(
            [binary, "multifidelity", "--serve", "--problems", problems],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def ask(self, problem, seed, params, epoch, trial):
        req = {"problem": problem, "seed": seed, "params": params, "epoch": epoch, "trial": trial}
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            sys.exit("tune-bench --serve stopped answering")
        a = json.loads(line)
        if "error" in a:
            raise RuntimeError(f"tune-bench --serve: {a['error']} (request {req})")
        return a["value"], a["final"]

    def close(self):
        self.p.stdin.close()
        self.p.wait()


class Run:
    """One optimizer on one problem with one seed: the compute and the incumbent."""

    def __init__(self, server, problem, seed, budgets, chance):
        self.server, self.problem, self.seed = server, problem, seed
        self.epochs = problem["epochs"]
        self.budgets = budgets
        self.cap = round(budgets[-1] * self.epochs)
        self.spent = 0
        self.incumbent = None  # (reported final, true final)
        self.best = []
        self.chance = chance
        self.trials = 0

    def new_trial(self):
        self.trials += 1
        return self.trials - 1

    def epoch(self, params, epoch, trial):
        """Trains `trial` one more epoch (to `epoch`); the reported loss, None when it is not a
        number. Raises Exhausted once the largest budget is spent."""
        if self.spent >= self.cap:
            raise Exhausted()
        self.spent += 1
        value, final = self.server.ask(self.problem["name"], self.seed, params, epoch, trial)
        if epoch == self.epochs and value is not None:
            if self.incumbent is None or value < self.incumbent[0]:
                self.incumbent = (value, final)
        while len(self.best) < len(self.budgets) and self.spent >= self.budgets[len(self.best)] * self.epochs - 1e-9:
            self.best.append(self.incumbent[1] if self.incumbent else self.chance)
        return value

    def train(self, params, epochs, trial):
        """Trains a fresh run of `params` for `epochs` epochs; the last reported loss (None:
        diverged)."""
        value = None
        for e in range(1, epochs + 1):
            value = self.epoch(params, e, trial)
            if value is None:
                return None
        return value

    def finish(self):
        while len(self.best) < len(self.budgets):
            self.best.append(self.incumbent[1] if self.incumbent else self.chance)
        return self.best


# ---- Optuna ---------------------------------------------------------------------------------

def optuna_suggest(trial, space):
    params = {}
    for name, d in space.items():
        kind = d["type"]
        if kind == "float":
            params[name] = trial.suggest_float(name, d["low"], d["high"], log=d.get("log", False), step=d.get("step"))
        elif kind == "int":
            params[name] = trial.suggest_int(name, d["low"], d["high"], log=d.get("log", False), step=d.get("step", 1))
        elif kind == "categorical":
            params[name] = trial.suggest_categorical(name, d["choices"])
        else:
            raise ValueError(f"parameter {name}: type {kind!r} is not handled")
    return params


def run_optuna(run, space, sampler_name, pruner_name):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)  # not the Exhausted that ends a run
    seed = run.seed
    sampler = {
        "tpe": lambda: optuna.samplers.TPESampler(seed=seed),
        "gp": lambda: optuna.samplers.GPSampler(seed=seed),
    }[sampler_name]()
    pruner = {
        "hyperband": lambda: optuna.pruners.HyperbandPruner(min_resource=1, max_resource=run.epochs, reduction_factor=3),
        "sha": lambda: optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3),
        "median": lambda: optuna.pruners.MedianPruner(),
    }[pruner_name]()
    # A fixed name: HyperbandPruner picks brackets from a hash of the study name.
    study = optuna.create_study(
        study_name=f"{run.problem['name']}-{seed}", direction="minimize", sampler=sampler, pruner=pruner
    )

    def objective(trial):
        params = optuna_suggest(trial, space)
        number = run.new_trial()
        value = None
        for e in range(1, run.epochs + 1):
            value = run.epoch(params, e, number)
            if value is None:
                return float("nan")  # Optuna records a NaN objective as a failed trial
            trial.report(value, e)
            if e < run.epochs and trial.should_prune():
                raise optuna.TrialPruned()
        return value

    try:
        study.optimize(objective, n_trials=10**9)
    except Exhausted:
        pass


# ---- ConfigSpace (DEHB, SMAC) ----------------------------------------------------------------

def config_space(space, seed):
    """A ConfigSpace of `space`; categoricals by the index of their choice (as strings), so that
    choices of any JSON type map back exactly."""
    from ConfigSpace import Categorical, ConfigurationSpace, Float, Integer

    cs = ConfigurationSpace(seed=seed)
    for name, d in space.items():
        kind = d["type"]
        if kind == "float":
            if d.get("step"):
                raise ValueError(f"parameter {name}: a float step is not handled")
            cs.add(Float(name, (d["low"], d["high"]), log=d.get("log", False)))
        elif kind == "int":
            cs.add(Integer(name, (d["low"], d["high"]), log=d.get("log", False)))
        elif kind == "categorical":
            cs.add(Categorical(name, [str(i) for i in range(len(d["choices"]))]))
        else:
            raise ValueError(f"parameter {name}: type {kind!r} is not handled")
    return cs


def from_config(config, space):
    params = {}
    for name, d in space.items():
        v = config[name]
        if d["type"] == "categorical":
            params[name] = d["choices"][int(v)]
        elif d["type"] == "int":
            params[name] = int(v)
        else:
            params[name] = float(v)
    return params


def fidelity_epochs(fidelity, epochs):
    return max(1, min(epochs, int(round(float(fidelity)))))


def run_dehb(run, space, workdir):
    from dehb import DEHB

    cs = config_space(space, run.seed)
    dehb = DEHB(
        cs=cs,
        min_fidelity=1,
        max_fidelity=run.epochs,
        eta=3,
        n_workers=1,
        seed=run.seed,
        output_path=os.path.join(workdir, f"dehb-{run.problem['name']}-{run.seed}"),
    )
    try:
        while True:
            job = dehb.ask()
            config = job["config"]
            if not hasattr(config, "keys"):
                config = dehb.vector_to_configspace(config)
            params = from_config(config, space)
            e = fidelity_epochs(job["fidelity"], run.epochs)
            value = run.train(params, e, run.new_trial())
            fitness = value if value is not None else 1e9
            dehb.tell(job, {"fitness": fitness, "cost": e})
    except Exhausted:
        pass


def run_smac(run, space, workdir):
    from smac import MultiFidelityFacade, Scenario
    from smac.runhistory.dataclasses import TrialValue

    cs = config_space(space, run.seed)
    scenario = Scenario(
        cs,
        deterministic=True,
        n_trials=10**6,
        min_budget=1,
        max_budget=run.epochs,
        seed=run.seed,
        output_directory=os.path.join(workdir, f"smac-{run.problem['name']}-{run.seed}"),
    )
    intensifier = MultiFidelityFacade.get_intensifier(scenario, eta=3)
    smac = MultiFidelityFacade(
        scenario,
        lambda config, seed=0, budget=1: 0.0,  # never called: ask/tell drives the runs
        intensifier=intensifier,
        overwrite=True,
        logging_level=40,
    )
    try:
        while True:
            info = smac.ask()
            params = from_config(info.config, space)
            e = fidelity_epochs(info.budget if info.budget is not None else run.epochs, run.epochs)
            value = run.train(params, e, run.new_trial())
            smac.tell(info, TrialValue(cost=value if value is not None else 1e9))
    except Exhausted:
        pass


# ---- Syne Tune ---------------------------------------------------------------------------------

def syne_config_space(space):
    """Syne Tune's config space of `space`; categoricals by the index of their choice (as
    strings), as for ConfigSpace."""
    from syne_tune.config_space import choice, loguniform, lograndint, randint, uniform

    cs = {}
    for name, d in space.items():
        kind = d["type"]
        if kind == "float":
            if d.get("step"):
                raise ValueError(f"parameter {name}: a float step is not handled")
            cs[name] = (loguniform if d.get("log") else uniform)(d["low"], d["high"])
        elif kind == "int":
            if d.get("step", 1) != 1:
                raise ValueError(f"parameter {name}: an int step is not handled")
            cs[name] = (lograndint if d.get("log") else randint)(d["low"], d["high"])
        elif kind == "categorical":
            cs[name] = choice([str(i) for i in range(len(d["choices"]))])
        else:
            raise ValueError(f"parameter {name}: type {kind!r} is not handled")
    return cs


def run_syne(run, space, scheduler_name):
    """A Syne Tune scheduler driven in an ask/tell loop (what its Tuner does with one worker,
    without the backend's processes): `suggest` a trial, `on_trial_add`, then one
    `on_trial_result` per epoch until the scheduler says STOP (`on_trial_remove`) or the trial
    reaches the last epoch (`on_trial_complete`); a diverged run is `on_trial_error`.
    type="stopping": a trial that continues trains on, one epoch at a time, and pays only for
    those epochs; nothing is paused and resumed."""
    from datetime import datetime

    from syne_tune.backend.trial_status import Trial
    from syne_tune.optimizer import baselines
    from syne_tune.optimizer.scheduler import SchedulerDecision

    eta = 3
    rungs = 1
    while eta**rungs <= run.epochs:
        rungs += 1
    kwargs = dict(
        metric="loss",
        mode="min",
        resource_attr="epoch",
        max_t=run.epochs,
        grace_period=1,
        reduction_factor=eta,
        type="stopping",
        random_seed=run.seed,
    )
    if scheduler_name == "asha":
        sched = baselines.ASHA(syne_config_space(space), **kwargs)
    elif scheduler_name == "mobster":
        sched = baselines.MOBSTER(syne_config_space(space), search_options={"debug_log": False}, **kwargs)
    elif scheduler_name == "hypertune":
        # Hyper-Tune samples a bracket per trial: all of them (grace periods 1, 3, 9, ...).
        sched = baselines.HyperTune(syne_config_space(space), search_options={"debug_log": False},
                                    brackets=rungs, **kwargs)
    else:
        raise ValueError(scheduler_name)
    trial_id = 0
    try:
        while True:
            suggestion = sched.suggest(trial_id)
            if suggestion is None:
                break  # the space is exhausted
            if not suggestion.spawn_new_trial_id:
                raise RuntimeError("a resume suggestion with type='stopping'")
            config = suggestion.config
            trial = Trial(trial_id=trial_id, config=config, creation_time=datetime.now())
            sched.on_trial_add(trial)
            params = from_config(config, space)
            number = run.new_trial()
            for e in range(1, run.epochs + 1):
                value = run.epoch(params, e, number)
                if value is None:
                    sched.on_trial_error(trial)
                    break
                result = {"loss": value, "epoch": e}
                decision = sched.on_trial_result(trial, result)
                if e == run.epochs:
                    sched.on_trial_complete(trial, result)
                    break
                if decision == SchedulerDecision.STOP:
                    sched.on_trial_remove(trial)
                    break
                if decision == SchedulerDecision.PAUSE:
                    raise RuntimeError("a PAUSE decision with type='stopping'")
            trial_id += 1
    except Exhausted:
        pass


METHODS = {
    "optuna-tpe-hyperband": lambda run, space, wd: run_optuna(run, space, "tpe", "hyperband"),
    "optuna-tpe-sha": lambda run, space, wd: run_optuna(run, space, "tpe", "sha"),
    "optuna-gp-median": lambda run, space, wd: run_optuna(run, space, "gp", "median"),
    "dehb": run_dehb,
    "smac-mf": run_smac,
    "syne-asha": lambda run, space, wd: run_syne(run, space, "asha"),
    "syne-mobster": lambda run, space, wd: run_syne(run, space, "mobster"),
    "syne-hypertune": lambda run, space, wd: run_syne(run, space, "hypertune"),
}

IMPORTS = {
    "optuna-tpe-hyperband": "optuna",
    "optuna-tpe-sha": "optuna",
    "optuna-gp-median": "optuna,torch",
    "dehb": "dehb",
    "smac-mf": "smac",
    "syne-asha": "syne_tune.optimizer.baselines",
    "syne-mobster": "syne_tune.optimizer.baselines,autograd",
    "syne-hypertune": "syne_tune.optimizer.baselines,autograd",
}


def torch_env(root):
    """The environment that makes the repository's CPU-usable torch importable: `.libtorch`
    (scripts/setup.sh --libtorch, the torch 2.13.0 wheel unpacked) and `.venv/bench`
    (scripts/setup.sh --bench: torch's pure-Python dependencies and the CUDA libraries that
    torch/_C links against, never used on a CPU). Both go at the END of sys.path; the dynamic
    loader finds the CUDA libraries only through LD_LIBRARY_PATH, which must be set before the
    process starts (hence a re-exec). None when the trees are missing or LD_LIBRARY_PATH
    already names them."""
    nvidia = os.path.join(root, ".venv", "bench", "nvidia")
    if not os.path.isdir(os.path.join(root, ".libtorch", "torch")) or not os.path.isdir(nvidia):
        return None
    libs = [os.path.join(nvidia, d, "lib") for d in sorted(os.listdir(nvidia))
            if os.path.isdir(os.path.join(nvidia, d, "lib"))]
    have = os.environ.get("LD_LIBRARY_PATH", "")
    if all(lib in have.split(":") for lib in libs):
        return None
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join(libs + ([have] if have else []))
    paths = [os.path.join(root, ".libtorch"), os.path.join(root, ".venv", "bench")]
    # After site-packages (as the .pth file puts them), not before: .venv/bench has a numpy of
    # its own, and the venv's must win.
    env["TUNE_MFBENCH_TORCH_PATHS"] = os.pathsep.join(paths)
    return env


def add_torch_paths():
    for p in os.environ.get("TUNE_MFBENCH_TORCH_PATHS", "").split(os.pathsep):
        if p and p not in sys.path:
            sys.path.append(p)


_SERVER = None


def run_task(task):
    """One (method, problem, seed) run in a pool process with a server of its own."""
    global _SERVER
    m, p, seed, budgets, chance, tune_bench, problems, workdir = task
    if _SERVER is None:
        _SERVER = Server(tune_bench, problems)
        try:
            from loguru import logger  # DEHB logs every bracket through loguru

            logger.disable("dehb")
        except ImportError:
            pass
        import logging

        logging.getLogger("syne_tune").setLevel(logging.WARNING)  # an INFO line per suggestion
    run = Run(_SERVER, p, seed, budgets, chance)
    start = time.time()
    try:
        METHODS[m](run, p["space"], workdir)
    except Exception as e:  # noqa: BLE001 - a crashing method is reported, not fatal
        print(f"{m} on {p['name']} seed {seed}: failed: {type(e).__name__}: {e}", file=sys.stderr)
        return None
    return {"best": run.finish(), "trials": run.trials, "seconds": time.time() - start}


def score(best, opt, ref):
    den = ref - opt
    if den <= 0:
        return 100.0 if best <= opt else -100.0
    return max(-100.0, min(100.0, 100.0 * (1.0 - (best - opt) / den)))


def print_table(methods, problems, budgets, results, ref_seeds):
    """The table of `results[method][problem][seed]` (a run's figures, None: failed); a seed
    whose runs are not all there (a cut --progress file) counts with the problems it has."""
    seeds = sorted({s for m in methods for runs in results.get(m, {}).values() for s in runs})
    heads = "".join(f" mean @{b:g} | worst seed @{b:g} |" for b in budgets)
    print(f"learning-curve problems: {len(problems)} ({', '.join(p['name'] for p in problems)}), "
          f"seeds {', '.join(map(str, seeds))}; score: 100 = optimum, 0 = random search without pruning "
          f"(median of {ref_seeds} seeds, tune-bench's) at the same compute")
    print()
    print(f"| method |{heads} trials | runs | failed runs |")
    print("|---|" + "---|---|" * len(budgets) + "---|---|---|")
    for m in methods:
        runs = [(p, s, results.get(m, {}).get(p["name"], {}).get(s, "missing")) for s in seeds for p in problems]
        runs = [(p, s, r) for p, s, r in runs if r != "missing"]
        row = f"| {m} |"
        failed = sum(1 for *_, r in runs if r is None)
        for b in range(len(budgets)):
            per_seed = {}
            for p, s, r in runs:
                if r is not None:
                    per_seed.setdefault(s, []).append(score(r["best"][b], p["optimum"], p["reference"][b]))
            all_scores = [x for sc in per_seed.values() for x in sc]
            mean = statistics.fmean(all_scores) if all_scores else math.nan
            worst = min((statistics.fmean(sc) for sc in per_seed.values()), default=math.nan)
            row += f" {mean:.1f} | {worst:.1f} |"
        trials = [r["trials"] for *_, r in runs if r]
        row += f" {statistics.fmean(trials) if trials else math.nan:.0f} | {len(runs)} | {failed} |"
        print(row)


def main():
    ap = argparse.ArgumentParser(description="other optimizers on tune's learning-curve problems")
    ap.add_argument("--tune-bench", default="target/release/tune-bench")
    ap.add_argument("--problems", default="all")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--ref-seeds", type=int, default=50)
    ap.add_argument("--budgets", default="10,30,100")
    ap.add_argument("--jobs", type=int, default=1, help="runs side by side (processes)")
    ap.add_argument("--workdir", default="/tmp/mfbench-python")
    ap.add_argument("--json", help="also write every run's figures here")
    ap.add_argument("--progress", help="append a JSON line per finished run here as it finishes")
    ap.add_argument("--torch-root", default=os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")),
                    help="the checkout whose .libtorch and .venv/bench (scripts/setup.sh --bench) give "
                         "torch, for Optuna's GPSampler, when the venv has none (default: this script's)")
    ap.add_argument("--from-progress", help="run nothing: the table of these --progress files (comma "
                    "list; the budgets must be those of the runs, or a prefix of them)")
    args = ap.parse_args()

    # Optuna's GPSampler imports torch. When it does not import, and this checkout has the
    # torch of `setup.sh --bench`, start again with the loader path that torch needs.
    add_torch_paths()
    try:
        import torch  # noqa: F401
    except Exception:  # noqa: BLE001 - ImportError, or OSError from the loader
        env = torch_env(args.torch_root)
        if env is not None:
            os.execve(sys.executable, [sys.executable] + sys.argv, env)

    listing = json.loads(subprocess.check_output([
        args.tune_bench, "multifidelity", "--list", "--problems", args.problems,
        "--budgets", args.budgets, "--ref-seeds", str(args.ref_seeds),
    ], text=True))
    budgets = listing["budgets"]
    problems = listing["problems"]
    if args.from_progress:
        results, methods = {}, []
        for path in args.from_progress.split(","):
            with open(path) as f:
                for line in f:
                    x = json.loads(line)
                    if x["method"] not in methods:
                        methods.append(x["method"])
                    results.setdefault(x["method"], {}).setdefault(x["problem"], {})[x["seed"]] = x["run"]
        print_table(methods, problems, budgets, results, listing["ref_seeds"])
        return
    methods = []
    for m in args.methods.split(","):
        if m not in METHODS:
            sys.exit(f"--methods: {m!r} is not one of {', '.join(METHODS)}")
        try:
            for mod in IMPORTS[m].split(","):
                __import__(mod)
            methods.append(m)
        except Exception as e:  # noqa: BLE001 - any import failure leaves the method out
            print(f"{m}: left out, `import {IMPORTS[m]}` failed: {e}", file=sys.stderr)
    os.makedirs(args.workdir, exist_ok=True)
    t0 = time.time()
    tasks = [(m, p, seed, budgets, listing["chance"], args.tune_bench, args.problems, args.workdir)
             for m in methods for p in problems for seed in range(args.seeds)]
    progress = open(args.progress, "a") if args.progress else None
    outcomes = []
    with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for (m, p, seed, *_), r in zip(tasks, pool.map(run_task, tasks)):
            outcomes.append(r)
            if progress:
                # One line per finished run: a long run that is cut short keeps what it did.
                progress.write(json.dumps({"method": m, "problem": p["name"], "seed": seed, "run": r}) + "\n")
                progress.flush()
    results = {}
    for (m, p, seed, *_), r in zip(tasks, outcomes):
        results.setdefault(m, {}).setdefault(p["name"], {})[seed] = r

    print_table(methods, problems, budgets, results, listing["ref_seeds"])
    print(f"\n{time.time() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"budgets": budgets, "problems": problems, "results": results}, f)


if __name__ == "__main__":
    main()
