#!/usr/bin/env python3
"""Optuna's side of the storage benchmark: how many no-op trials per second Optuna's RDBStorage
sustains on one PostgreSQL server with P processes sharing one study.

    .venv/bin/python crates/tune-bench/python/optuna_storage_bench.py \\
        --storage postgresql+psycopg2://tune:PW@127.0.0.1:5432/bench --processes 8 --duration 10

What it does, so the figure compares with tune's side of `tune bench storage`:
  - creates a fresh study (default sampler, as a user would) in the given database;
  - starts P processes (spawned, each with its own RDBStorage and its own connections), which
    all wait until the last one is ready, so that interpreter start and imports are not timed;
  - each runs `study.optimize(objective)` with an objective that returns 0.0 at once, until the
    common deadline (start + D seconds) passes;
  - prints one JSON line: trials completed (counted in the database afterwards), trials/s over
    the measured wall time, errors (exceptions out of `optimize`, which the process counts and
    then goes on, plus trials that ended FAIL), the p50/p95 of the time from the end of one
    trial to the start of the next in a process (Optuna's ask: create the trial and sample),
    and the most connections the study's database held at once.

Exit status: 0 after printing the line, 2 on bad arguments or when the database cannot be
reached at all.
"""

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
import uuid


def _percentile(sorted_values, q):
    if not sorted_values:
        return None
    k = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[k]


def _worker(storage_url, study_name, duration_s, ready, go, start_at, results):
    """One process: optimize until the common deadline; report counts and ask latencies."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    errors = 0
    ask_s = []
    last_end = [None]

    def objective(trial):
        now = time.perf_counter()
        if last_end[0] is not None:
            ask_s.append(now - last_end[0])
        return 0.0

    def after_trial(study, frozen):
        last_end[0] = time.perf_counter()
        if time.time() >= start_at.value + duration_s:
            study.stop()

    try:
        storage = optuna.storages.RDBStorage(storage_url)
        study = optuna.load_study(study_name=study_name, storage=storage)
    except Exception as e:  # a process that cannot even open the study is one error
        ready.wait()
        go.wait()
        results.put({"errors": 1, "ask_s": [], "first_error": repr(e)[:300]})
        return
    ready.wait()
    go.wait()
    first_error = None
    while time.time() < start_at.value + duration_s:
        try:
            last_end[0] = time.perf_counter()
            study.optimize(objective, callbacks=[after_trial], gc_after_trial=False)
        except Exception as e:  # counted, never fatal: the benchmark measures errors
            errors += 1
            if first_error is None:
                first_error = repr(e)[:300]
    results.put({"errors": errors, "ask_s": ask_s, "first_error": first_error})


def _connections(engine, db_name):
    from sqlalchemy import text

    with engine.connect() as c:
        return c.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = :db AND pid <> pg_backend_pid()"
            ),
            {"db": db_name},
        ).scalar()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--storage",
        required=True,
        help="a SQLAlchemy URL of a PostgreSQL database: postgresql+psycopg2://USER:PW@HOST:PORT/DB",
    )
    parser.add_argument("--processes", type=int, required=True, help="P: processes sharing the study")
    parser.add_argument("--duration", type=float, required=True, help="D: seconds to run")
    parser.add_argument("--study-name", default=None, help="default: a fresh unique name")
    args = parser.parse_args(argv)
    if args.processes < 1:
        parser.error("--processes must be at least 1")
    if not args.duration > 0:
        parser.error("--duration must be positive")
    if not args.storage.startswith(("postgresql", "postgres")):
        parser.error("--storage must be a PostgreSQL URL (postgresql+psycopg2://…)")

    import optuna
    import sqlalchemy

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study_name = args.study_name or f"optuna-bench-{uuid.uuid4().hex[:12]}"
    try:
        storage = optuna.storages.RDBStorage(args.storage)
        optuna.create_study(study_name=study_name, storage=storage, direction="minimize")
    except Exception as e:
        # The URL may hold a password: name the error only.
        print(f"optuna_storage_bench: cannot create the study: {type(e).__name__}", file=sys.stderr)
        return 2
    # The parent's own pooled connection would count among the study's connections.
    storage.engine.dispose()
    engine = sqlalchemy.create_engine(args.storage, poolclass=sqlalchemy.pool.NullPool)
    db_name = sqlalchemy.engine.make_url(args.storage).database

    ctx = mp.get_context("spawn")
    start_at = ctx.Value("d", 0.0)
    # Two barriers: every child has imported optuna and opened the study (ready), then the
    # parent sets the common start and releases them all (go). Spawning 64 interpreters takes
    # longer than a short run, so the clock must not start before the last one is ready.
    ready = ctx.Barrier(args.processes + 1)
    go = ctx.Barrier(args.processes + 1)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=_worker,
            args=(args.storage, study_name, args.duration, ready, go, start_at, results),
        )
        for _ in range(args.processes)
    ]
    for p in procs:
        p.start()
    ready.wait()
    # Every child has opened the study; the clock starts now for all of them.
    start_at.value = time.time()
    t0 = time.perf_counter()
    go.wait()
    max_connections = 0
    collected = []
    while len(collected) < len(procs):
        try:
            max_connections = max(max_connections, _connections(engine, db_name))
        except Exception:
            pass
        try:
            collected.append(results.get(timeout=0.2))
        except Exception:
            if not any(p.is_alive() for p in procs) and results.empty():
                break
    elapsed = time.perf_counter() - t0
    for p in procs:
        p.join(timeout=30)
    crashed = sum(1 for p in procs if p.exitcode not in (0, None))

    study = optuna.load_study(study_name=study_name, storage=storage)
    states = [t.state for t in study.get_trials(deepcopy=False)]
    complete = sum(1 for s in states if s == optuna.trial.TrialState.COMPLETE)
    failed = sum(1 for s in states if s == optuna.trial.TrialState.FAIL)
    asks = sorted(x for r in collected for x in r["ask_s"])
    first_errors = [r["first_error"] for r in collected if r.get("first_error")]
    line = {
        "bench": "optuna-rdb-storage",
        "optuna": optuna.__version__,
        "processes": args.processes,
        "duration_s": args.duration,
        "elapsed_s": round(elapsed, 3),
        "trials": complete,
        "trials_per_s": round(complete / elapsed, 2) if elapsed > 0 else None,
        "errors": sum(r["errors"] for r in collected) + failed + crashed,
        "failed_trials": failed,
        "ask_p50_ms": None if not asks else round(_percentile(asks, 0.50) * 1e3, 3),
        "ask_p95_ms": None if not asks else round(_percentile(asks, 0.95) * 1e3, 3),
        "max_connections": max_connections,
        "study": study_name,
    }
    if first_errors:
        # A driver's message may quote the connection string: never print the password.
        password = sqlalchemy.engine.make_url(args.storage).password
        line["first_error"] = first_errors[0].replace(password, "****") if password else first_errors[0]
    print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
