"""Optuna's side of `tune bench report`: times `optuna.importance.get_param_importances` with
PED-ANOVA or fANOVA on the study that tune wrote into a SQLite file (Optuna loads tune's
database as its own). Prints one JSON line: seconds for each evaluator asked for (the call
alone, which reads the trials from storage; not the interpreter's start or the imports) and
Optuna's version. tune runs it once per evaluator, so that it can stop one that runs too long
and still have the other's figure.

    python optuna_importance_bench.py --db bench.db --study bench [--method fanova] [--repeat 1]
"""

import argparse
import json
import time
import warnings

import optuna
from optuna.importance import (
    FanovaImportanceEvaluator,
    PedAnovaImportanceEvaluator,
    get_param_importances,
)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--study", required=True)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--method", choices=["ped-anova", "fanova"], action="append")
    a = p.parse_args()
    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    storage = f"sqlite:///{a.db}"
    out = {"optuna": optuna.__version__}
    evaluators = {
        "ped-anova": PedAnovaImportanceEvaluator,
        "fanova": lambda: FanovaImportanceEvaluator(seed=0),
    }
    for name in a.method or list(evaluators):
        make = evaluators[name]
        times = []
        for _ in range(a.repeat):
            # A fresh load each time, so no run reads trials another one cached.
            study = optuna.load_study(study_name=a.study, storage=storage)
            t = time.perf_counter()
            get_param_importances(study, evaluator=make())
            times.append(time.perf_counter() - t)
        times.sort()
        out[name] = times[len(times) // 2]
    out["trials"] = len(
        optuna.load_study(study_name=a.study, storage=storage).get_trials(deepcopy=False)
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
