"""Writes ped_anova_optuna.json: a mixed, conditional study and Optuna's PED-ANOVA importances
of it (Optuna's defaults), which src/insight/ped_anova.rs's tests hold tune's to.
Run with a Python that has optuna: python make_ped_anova_reference.py > ped_anova_optuna.json"""
import json
import math
import random

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances

optuna.logging.set_verbosity(optuna.logging.ERROR)
rng = random.Random(7)
D = {
    "x": FloatDistribution(-5.0, 5.0),
    "lr": FloatDistribution(1e-4, 1e-1, log=True),
    "n": IntDistribution(1, 8),
    "width": IntDistribution(16, 512, log=True),
    "q": FloatDistribution(0.0, 1.0, step=0.1),
    "opt": CategoricalDistribution(["adam", "sgd", "rms"]),
    "mom": FloatDistribution(0.0, 0.99),
}
cases = []
for n_trials, maximize in [(60, False), (200, True), (23, False)]:
    study = optuna.create_study(direction="maximize" if maximize else "minimize")
    rows = []
    for _ in range(n_trials):
        p = {
            "x": rng.uniform(-5, 5),
            "lr": math.exp(rng.uniform(math.log(1e-4), math.log(1e-1))),
            "n": rng.randint(1, 8),
            "width": int(round(math.exp(rng.uniform(math.log(16), math.log(512))))),
            "q": round(rng.randint(0, 10) * 0.1, 10),
            "opt": rng.choice(["adam", "sgd", "rms"]),
        }
        dists = {k: D[k] for k in p}
        if p["opt"] == "sgd":
            p["mom"] = rng.uniform(0.0, 0.99)
            dists["mom"] = D["mom"]
        v = (p["x"] - 1.0) ** 2 + 3.0 * abs(math.log10(p["lr"]) + 2.5) + 0.2 * p["n"]
        v += {"adam": 0.0, "sgd": 1.5, "rms": 0.7}[p["opt"]] + 2.0 * p.get("mom", 0.0)
        v += 0.3 * rng.random()
        if maximize:
            v = -v
        study.add_trial(optuna.trial.create_trial(params=p, distributions=dists, value=v))
        rows.append({"params": p, "value": v})
    imp = get_param_importances(study, evaluator=PedAnovaImportanceEvaluator())
    raw = get_param_importances(study, evaluator=PedAnovaImportanceEvaluator(), normalize=False)
    cases.append({"maximize": maximize, "trials": rows, "importances": imp, "raw": raw})
print(json.dumps({"optuna": optuna.__version__, "cases": cases}, indent=1))
