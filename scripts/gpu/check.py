#!/usr/bin/env python3
"""The body of scripts/gpu-check.sh: every GPU check of tune in one call (docs/gpu.md).

The shell script has already refused a machine without a GPU and found a Python with torch (this
interpreter). Each step below is time-boxed; a step that does not fit the remaining budget is
skipped and says so, a step that fails is recorded and the next one runs, and the report
(OUTDIR/report.md, OUTDIR/report.json) is written whatever happened. Raw outputs go to
OUTDIR/raw/. Exit status: 0 when every step ran, 1 when one failed or was skipped, 2 on bad use.
"""

import argparse
import json
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "gpu-bundle"
STEPS = ["env", "setup", "bench", "graphs", "throughput", "oom", "telemetry", "ui", "checkpointing", "stream", "bench1024", "resume"]


class Smi:
    """nvidia-smi sampling GPU 0 every 200 ms in the background; means over time windows."""

    def __init__(self, raw):
        self.samples = []  # (t, sm %, mem-bandwidth %, memory MiB)
        self.proc = None
        if not shutil.which("nvidia-smi"):  # a rehearsal on the CPU
            return
        self.proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=utilization.gpu,utilization.memory,memory.used",
             "--format=csv,noheader,nounits", "-i", "0", "-lms", "200"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.log = open(raw / "nvidia-smi.csv", "w")
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                sm, bw, mem = (float(x) for x in line.strip().split(","))
            except ValueError:
                continue
            t = time.time()
            self.samples.append((t, sm, bw, mem))
            self.log.write(f"{t:.2f},{sm:.0f},{bw:.0f},{mem:.0f}\n")

    def window(self, t0, t1):
        s = [x for x in self.samples if t0 <= x[0] <= t1]
        if not s:
            return {"samples": 0}
        return {
            "samples": len(s),
            "mean_sm_pct": round(sum(x[1] for x in s) / len(s), 1),
            "mean_mem_bw_pct": round(sum(x[2] for x in s) / len(s), 1),
            "peak_mem_mib": max(x[3] for x in s),
            # Busy seconds only: what the GPU did while work was on it.
            "busy_mean_sm_pct": round(sum(x[1] for x in s if x[1] > 0) / max(1, sum(1 for x in s if x[1] > 0)), 1),
        }

    def stop(self):
        if self.proc:
            self.proc.terminate()
            self.log.close()


class Check:
    def __init__(self, args):
        self.out = pathlib.Path(args.outdir).resolve()
        self.raw = self.out / "raw"
        self.raw.mkdir(parents=True, exist_ok=True)
        self.args = args
        self.t0 = time.time()
        self.budget = args.budget
        self.results = {"steps": {}, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        self.md = []
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="tune-gpu-check-"))
        self.env = dict(os.environ)
        import torch  # the torch this check measures against

        self.torch = torch
        self.torch_lib = pathlib.Path(torch.__file__).parent / "lib"
        self.env["LD_LIBRARY_PATH"] = ":".join(
            [str(self.torch_lib)] + [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p])
        self.env["PYTHON"] = sys.executable
        self.env["TUNE_REPO"] = str(ROOT)  # where tune-worker bench finds the PyTorch side
        self.env.setdefault("TERM", "xterm-256color")
        self.tune = self.worker = None
        self.device = args.device
        self.how = ""
        self.smi = Smi(self.raw)

    # ---- plumbing ----
    def left(self):
        return self.budget - (time.time() - self.t0)

    def run(self, name, cmd, timeout, cwd=None, env=None):
        """Runs cmd, keeps its output in raw/NAME.log; returns (rc, output, t0, t1)."""
        t0 = time.time()
        try:
            p = subprocess.run(cmd, cwd=cwd or ROOT, env=env or self.env, capture_output=True, text=True,
                               timeout=max(1, timeout))
            rc, out = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired as e:
            rc = 124
            out = ((e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""))
            out += "\n[timed out after %ds]" % timeout
        t1 = time.time()
        with open(self.raw / f"{name}.log", "a") as f:
            f.write("$ " + " ".join(str(c) for c in cmd) + "\n" + out + f"\n[exit {rc}, {t1 - t0:.1f} s]\n\n")
        return rc, out, t0, t1

    def step(self, name, estimate, fn):
        if self.args.only and name not in self.args.only:
            return
        r = {"estimate_s": estimate}
        self.results["steps"][name] = r
        if self.left() < estimate:
            r["status"] = "skipped"
            r["why"] = f"{self.left():.0f} s of the budget left, the step needs about {estimate} s"
            self.md.append(f"## {name}\n\nSkipped: {r['why']}.\n")
            print(f"gpu-check: {name}: skipped ({r['why']})", flush=True)
            return
        t0 = time.time()
        print(f"gpu-check: {name} ({self.left():.0f} s left)", flush=True)
        try:
            fn(r)
            r.setdefault("status", "ok")
        except Exception as e:  # a failing step must not cost the others
            r["status"] = "failed"
            r["error"] = f"{type(e).__name__}: {e}"
            with open(self.raw / f"{name}.log", "a") as f:
                f.write(traceback.format_exc())
            self.md.append(f"## {name}\n\nFailed: `{r['error']}` (raw/{name}.log).\n")
        r["seconds"] = round(time.time() - t0, 1)
        print(f"gpu-check: {name}: {r['status']} in {r['seconds']} s", flush=True)

    def study(self, name, text):
        d = self.tmp / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "study.toml").write_text(text)
        return d

    def trials(self, d, timeout=30):
        """Every trial of the study in d, as `tune trials --format json` gives them."""
        cmd = [self.tune, "--db", str(d / "tune.db"), "trials", str(d / "study.toml"), "--state", "all", "--format", "json"]
        p = subprocess.run(cmd, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout)
        with open(self.raw / f"trials-{d.name}.json", "w") as f:
            f.write(p.stdout + p.stderr)
        if p.returncode != 0:
            raise RuntimeError(f"tune trials failed ({p.returncode}): {p.stderr[-300:]}")
        return json.loads(p.stdout)

    # ---- the binaries ----
    def find_binaries(self):
        if self.args.bin_dir:
            d = pathlib.Path(self.args.bin_dir).resolve()
            self.tune, self.worker = d / "tune", d / "tune-worker"
            self.how = f"--bin-dir {d}"
            return
        tv = self.torch.__version__.split("+")[0]
        manifest = BUNDLE / "manifest.json"
        if manifest.is_file():
            m = json.loads(manifest.read_text())
            if m.get("torch", "").rsplit(".", 1)[0] == tv.rsplit(".", 1)[0]:
                self.tune, self.worker = BUNDLE / "bin/tune", BUNDLE / "bin/tune-worker"
                self.how = (f"carried gpu-bundle/ (tch {m.get('tch')} for torch {m.get('torch')}, commit {m.get('commit')}"
                            f"{' with uncommitted changes' if m.get('dirty') else ''}, built {m.get('built')})")
                self.results["bundle"] = m
                return
            self.how = f"gpu-bundle/ is for torch {m.get('torch')}, not {tv}; "
        rel = ROOT / "target/release"
        if (rel / "tune-worker").is_file() and (rel / "tune").is_file():
            self.tune, self.worker = rel / "tune", rel / "tune-worker"
            self.how += "target/release (built here)"
            return
        if shutil.which("cargo"):
            rc, out, _, _ = self.run("build", ["bash", "scripts/setup.sh", "--cuda", "--torch-python", sys.executable], 1200)
            if rc == 0:
                self.tune, self.worker = rel / "tune", rel / "tune-worker"
                self.how += "built here by scripts/setup.sh --cuda --torch-python"
                return
            raise SystemExit(f"gpu-check: building against this torch failed (raw/build.log):\n{out[-800:]}")
        print(f"gpu-check: no tune-worker for torch {tv}: {self.how}no target/release and no cargo here.\n"
              f"Build one on a machine with Rust and carry it: scripts/gpu-bundle.sh --torch {tv} --python "
              f"{sys.version_info.major}.{sys.version_info.minor} (docs/gpu.md)", file=sys.stderr)
        raise SystemExit(2)

    # ---- steps ----
    def s_env(self, r):
        smi = shutil.which("nvidia-smi")
        q = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True).stdout.strip().splitlines() if smi else ["none"]
        cuda = re.search(r"CUDA Version:\s*([0-9.]+)", subprocess.run([smi], capture_output=True, text=True).stdout) if smi else None
        r.update({
            "gpus": q, "driver_cuda": cuda.group(1) if cuda else None,
            "torch": self.torch.__version__, "torch_cuda": self.torch.version.cuda, "python": platform.python_version(),
            "python_exe": sys.executable, "cpus": os.cpu_count(), "binaries": self.how,
            "tune": str(self.tune), "tune_worker": str(self.worker),
        })
        self.results["machine"] = r
        self.md.append("## Machine\n\n" + "\n".join([
            f"- GPU: {'; '.join(q)} (driver CUDA {r['driver_cuda']}), {r['cpus']} CPU cores",
            f"- torch {r['torch']} (CUDA {r['torch_cuda']}), Python {r['python']} ({sys.executable})",
            f"- tune and tune-worker: {self.how}",
        ]) + "\n")

    def s_setup(self, r):
        rc, out, _, _ = self.run("setup", ["bash", "scripts/setup.sh", "--cuda", "--torch-python", sys.executable, "--check"], 60)
        r["setup_check_rc"] = rc
        r["setup_check"] = out.strip()
        rc2, caps, _, _ = self.run("capabilities", [self.worker, "--capabilities"], 60)
        line = caps.strip().splitlines()[-1] if caps.strip() else "{}"
        c = json.loads(line) if rc2 == 0 else {}
        r["capabilities"] = c
        ok = bool(c.get("cuda")) and c.get("cuda_devices", 0) >= 1
        r["status"] = "ok" if ok else "failed"
        self.md.append("## Set-up (`scripts/setup.sh --cuda --torch-python PY --check`)\n\n"
                       f"Exit {rc}:\n\n```\n{out.strip()[-1500:]}\n```\n\n"
                       f"`tune-worker --capabilities` ({self.how}): `{line}` — "
                       f"{'CUDA seen' if ok else 'NO CUDA: every later step on cuda:0 will fail'}.\n")

    def bench_rows(self, out):
        """The rows of `tune-worker bench`'s table: `model [+ckpt] amp graphs | tune/s torch/s ratio |
        tune/cpu-s torch/cpu-s ratio | amp/fp32 | peak MB`."""
        rows = []
        for line in out.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) < 4:
                continue
            head = parts[0].split()
            amps = [w for w in head if w in ("fp32", "bf16", "fp16", "off")]
            if not head or not amps or head[0] == "model":
                continue
            wall = parts[1].split()
            if len(wall) != 3:
                continue
            num = lambda w: float(w) if w not in ("-", "") else None
            rows.append({
                "model": head[0] + (" +ckpt" if "+ckpt" in head else ""), "amp": amps[0],
                "graphs": head[-1] if head[-1] in ("on", "off", "eager") else None,
                "tune_per_s": float(wall[0]), "torch_per_s": num(wall[1]), "ratio": num(wall[2]),
                "amp_over_fp32": parts[3] if len(parts) > 3 else "-",
                "peak_mb": parts[4] if len(parts) > 4 else "-",
            })
        return rows

    def bench(self, r, batch, models, steps, name):
        r["batch"] = batch
        r["data"] = self.bench_data()
        r["rows"] = []
        (ROOT / ".venv/bench").mkdir(parents=True, exist_ok=True)  # the PyTorch side's marker
        for m in models:
            rc, out, t0, t1 = self.run(name, [self.worker, "bench", "--device", self.device, "--models", m, "--amp", "off,bf16,fp16",
                                              "--steps", str(steps), "--repeat", "2", "--batch", str(batch)], 150)
            if rc != 0:
                r.setdefault("errors", []).append(f"{m}: exit {rc}: {out.strip().splitlines()[-1] if out.strip() else ''}")
                continue
            sm = self.smi.window(t0, t1)
            for row in self.bench_rows(out):
                row["sm_both_sides"] = sm.get("busy_mean_sm_pct")
                r["rows"].append(row)
        if r.get("errors"):
            r["status"] = "failed"
        lines = [f"## Trainer against eager PyTorch, batch {batch}\n",
                 f"`tune-worker bench --device cuda:0 --models M --amp off,bf16,fp16 --steps {steps} --repeat 2 --batch {batch}`, "
                 f"one process per model, on {r['data']}; SM % is the busy-second mean of the whole run (both sides alternate).\n",
                 "| model | amp | graphs | tune /s | torch /s | ratio | amp/fp32 | peak MB | SM % |",
                 "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for x in r["rows"]:
            torch_s = f"{x['torch_per_s']:.0f}" if x["torch_per_s"] else "-"
            lines.append(f"| {x['model']} | {x['amp']} | {x['graphs']} | {x['tune_per_s']:.0f} | {torch_s} | "
                         f"{x['ratio'] if x['ratio'] is not None else '-'} | {x['amp_over_fp32']} | {x['peak_mb']} | {x['sm_both_sides']} |")
        for e in r.get("errors", []):
            lines.append(f"\nError: {e}")
        if batch == 128:
            ratios = [x["ratio"] for x in r["rows"] if x["ratio"] is not None]
            r["goal_min_ratio_1_3"] = bool(ratios) and min(ratios) >= 1.3
            lines.append(f"\nGoal ≥ 1.3× on every row: {'met' if r['goal_min_ratio_1_3'] else 'NOT met'} "
                         f"(lowest {min(ratios) if ratios else '-'}).")
        self.md.append("\n".join(lines) + "\n")

    def bench_data(self):
        """tune-worker bench reads Fashion-MNIST from its Debian place only; link the bundle's there
        where it is missing (and we may), so that both sides train on it, else they use digits."""
        std = pathlib.Path("/usr/share/datasets/fashion-mnist")
        if not (std / "train-images-idx3-ubyte.gz").is_file() and (BUNDLE / "data/fashion-mnist").is_dir():
            try:
                std.parent.mkdir(parents=True, exist_ok=True)
                std.symlink_to(BUNDLE / "data/fashion-mnist")
            except OSError as e:
                return f"digits (could not link Fashion-MNIST into {std}: {e})"
        return "fashion-mnist" if (std / "train-images-idx3-ubyte.gz").is_file() else "digits"

    def s_bench(self, r):
        self.bench(r, 128, ["mlp", "cnn", "resnet", "transformer"], 100, "bench")

    def s_bench1024(self, r):
        # The Transformer's text has fewer windows than one batch of 1024: the bench refuses it.
        self.bench(r, 1024, ["mlp", "cnn", "resnet"], 40, "bench1024")

    def s_graphs(self, r):
        r["data"] = self.bench_data()
        rc, out, t0, t1 = self.run("graphs", [self.worker, "bench", "--device", self.device, "--models", "mlp,cnn",
                                              "--amp", "off,bf16", "--steps", "200", "--repeat", "2", "--batch", "128",
                                              "--no-python", "--cuda-graphs", "on,off"], 150)
        r["output"] = out.strip()[-3000:]
        r["rc"] = rc
        speedups = {m.group(1): float(m.group(2)) for m in re.finditer(r"cuda graphs (\w+ \w+): ([0-9.]+)x", out)}
        r["speedups"] = speedups
        # Every model and precision: which capture, which fall back and why (stderr says).
        rc2, out2, _, _ = self.run("graphs-coverage", [self.worker, "bench", "--device", self.device, "--models",
                                                       "mlp,cnn,resnet,transformer", "--amp", "off,bf16,fp16", "--steps", "50",
                                                       "--repeat", "1", "--batch", "128", "--no-python", "--cuda-graphs", "on,off"], 150)
        r["coverage_rc"] = rc2
        mlp_cnn = [v for k, v in speedups.items() if k.split()[0] in ("mlp", "cnn") and k.split()[1] in ("off", "fp32")]
        r["goal_1_5"] = bool(mlp_cnn) and min(mlp_cnn) >= 1.5
        if rc != 0 or rc2 != 0:
            r["status"] = "failed"
        self.md.append("## CUDA graphs\n\n`tune-worker bench --device cuda:0 --models mlp,cnn --amp off,bf16 --steps 200 "
                       "--repeat 2 --batch 128 --no-python --cuda-graphs on,off`\n\n```\n" + out.strip()[-3000:] + "\n```\n\n"
                       f"Goal ≥ 1.5× on the MLP and the CNN in fp32: {'met' if r['goal_1_5'] else 'NOT met'} ({speedups}).\n\n"
                       "Coverage, every model and precision (`--steps 50 --repeat 1`):\n\n```\n" + out2.strip()[-3500:] + "\n```\n")

    def s_checkpointing(self, r):
        r["data"] = self.bench_data()
        cmd = [self.worker, "bench", "--device", self.device, "--models", "resnet,transformer", "--amp", "off,bf16",
               "--checkpointing", "off,on", "--cuda-graphs", "off", "--batch", "256", "--steps", "40", "--warmup", "5",
               "--repeat", "2", "--no-python"]
        rc, out, t0, t1 = self.run("checkpointing", cmd, 150)
        r["output"] = out.strip()[-3000:]
        r["rc"] = rc
        if rc != 0:
            r["status"] = "failed"
        self.md.append("## Gradient checkpointing\n\n`" + " ".join(str(c) for c in cmd[1:]) + "` (`peak MB`: the caching "
                       "allocator's peak above what was in use before the model was built)\n\n```\n" + out.strip()[-3000:] + "\n```\n")

    def data_toml(self):
        d = BUNDLE / "data/fashion-mnist"
        if not (d / "train-images-idx3-ubyte.gz").is_file():
            d = pathlib.Path("/usr/share/datasets/fashion-mnist")
        if not (d / "train-images-idx3-ubyte.gz").is_file():
            raise RuntimeError("no Fashion-MNIST: carry gpu-bundle/ (scripts/gpu-bundle.sh) or install it")
        return d

    QUICK_SPACE = """
[space]
lr = { type = "float", low = 1e-5, high = 1.0, log = true }
optimizer = { type = "categorical", choices = ["sgd", "adam", "adamw"] }
momentum = { type = "float", low = 0.0, high = 0.95, when = { optimizer = "sgd" } }
width = { type = "categorical", choices = [64, 128, 256] }
batch_size = { type = "categorical", choices = [64, 128, 256] }
accumulation = { type = "int", low = 1, high = 4, log = true }
amp = { type = "categorical", choices = ["bf16", "off"] }
dropout = { type = "float", low = 0.0, high = 0.3 }
"""

    def builtin_study(self, name, workers, extra_study="", space=None, data_extra="", trial_extra="", epochs=1):
        return f"""[study]
name = "{name}"
metric = "val_loss"
direction = "minimize"
seed = 1
{extra_study}
{space or self.QUICK_SPACE}
[sampler]
kind = "random"

[pruner]
kind = "none"

[workers]
devices = ["{self.device}"]
{workers}

[trial]
kind = "builtin"
epochs = {epochs}
schedule = "cosine"
warmup = 0.05
timeout = "2m"
{trial_extra}
[trial.model]
kind = "mlp"
depth = 2

[trial.data]
dataset = "fashion-mnist"
dir = "{self.data_toml()}"
{data_extra}
"""

    def s_throughput(self, r):
        window = self.args.window
        r["window_s"] = window
        r["runs"] = []
        def fits(what):
            if self.left() < window + 10:
                r.setdefault("skipped", []).append(what)
                r["status"] = "failed"
                return False
            return True

        for slots in (1, 2, 4, 8):
            if not fits(f"tune {slots} slots"):
                continue
            d = self.study(f"tp{slots}", self.builtin_study(f"tp{slots}", f"slots_per_device = {slots}",
                                                             extra_study=f'timeout = "{window}s"\ntrials = 100000'))
            rc, out, t0, t1 = self.run(f"throughput-tune-{slots}", [self.tune, "--db", str(d / "tune.db"), "run",
                                                                    str(d / "study.toml"), "--no-tui"],
                                       min(window + 90, self.left() - 5))
            ts = self.trials(d)
            done = [t for t in ts if t["state"] in ("complete", "failed", "pruned")]
            comp = [t for t in ts if t["state"] == "complete"]
            wall = t1 - t0
            sm = self.smi.window(t0, t1)
            r["runs"].append({"who": "tune", "slots": slots, "rc": rc, "finished": len(done), "complete": len(comp),
                              "wall_s": round(wall, 1), "trials_per_h": round(len(done) / wall * 3600),
                              "best_val_loss": min((t["value"] for t in comp if t.get("value") is not None), default=None), **sm})
        pydeps = self.optuna_path()
        for jobs in (1, 4):
            if not fits(f"optuna n_jobs={jobs}"):
                continue
            env = dict(self.env)
            if pydeps:
                env["PYTHONPATH"] = pydeps
            rc, out, t0, t1 = self.run(f"throughput-optuna-{jobs}", [sys.executable, str(ROOT / "scripts/gpu/optuna_eager.py"),
                                                                     "--data", str(self.data_toml()), "--n-jobs", str(jobs),
                                                                     "--timeout", str(window), "--epochs", "1", "--seed", "1", "--device", self.device],
                                       min(window + 90, self.left() - 5), env=env)
            wall = t1 - t0
            sm = self.smi.window(t0, t1)
            res = {}
            per_trial = []
            for line in out.splitlines():
                if line.startswith("{"):
                    x = json.loads(line)
                    if "trial" in x:
                        per_trial.append(x)
                    else:
                        res = x
            # Killed past its time (rc 124): count the trials it printed as they finished.
            done = res.get("finished", len(per_trial))
            r["runs"].append({"who": "optuna+eager", "slots": jobs, "rc": rc, "finished": done, "complete": res.get("complete", 0),
                              "wall_s": round(wall, 1), "trials_per_h": round(done / wall * 3600),
                              "best_val_loss": res.get("best"), **sm})
        if not any(x["who"] == "tune" for x in r["runs"]):
            raise RuntimeError("no tune run fitted in the budget")
        tune_best = max((x for x in r["runs"] if x["who"] == "tune"), key=lambda x: x["trials_per_h"])
        opt1 = next((x for x in r["runs"] if x["who"] != "tune" and x["slots"] == 1), None)
        r["best_tune"] = tune_best
        r["ratio_vs_optuna_1"] = round(tune_best["trials_per_h"] / opt1["trials_per_h"], 2) if opt1 and opt1["trials_per_h"] else None
        r["goal"] = bool(r["ratio_vs_optuna_1"] and r["ratio_vs_optuna_1"] >= 3 and tune_best.get("mean_sm_pct", 0) >= 80)
        lines = ["## Study throughput on one GPU\n",
                 f"The quickstart's space and model (MLP, depth 2, full Fashion-MNIST, 1 epoch a trial, cosine, random sampler, "
                 f"no pruning), each run given a {window} s window (`[study] timeout`; running trials finish), whole-run wall clock "
                 "(start-up and data loading included). Optuna: `scripts/gpu/optuna_eager.py`, the same space and model in eager "
                 "PyTorch, RandomSampler, `study.optimize(n_jobs=N, timeout=W)`. SM % and memory-bandwidth % are nvidia-smi means "
                 "over the run.\n",
                 "| who | slots / n_jobs | finished | wall s | trials / h | mean SM % | mean mem-bw % | peak MiB | best val_loss |",
                 "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for x in r["runs"]:
            best = f"{x['best_val_loss']:.4f}" if isinstance(x.get("best_val_loss"), (int, float)) else "-"
            lines.append(f"| {x['who']} | {x['slots']} | {x['finished']} | {x['wall_s']} | {x['trials_per_h']} | "
                         f"{x.get('mean_sm_pct', '-')} | {x.get('mean_mem_bw_pct', '-')} | {x.get('peak_mem_mib', '-')} | {best} |")
        ratio = f"{r['ratio_vs_optuna_1']}×" if r["ratio_vs_optuna_1"] is not None else "no ratio (Optuna finished no trial)"
        lines.append(f"\nBest tune ({tune_best['slots']} slots) / Optuna n_jobs=1: **{ratio}**; "
                     f"goal ≥ 3× with SM ≥ 80 %: {'met' if r['goal'] else 'NOT met'}.")
        if r.get("skipped"):
            lines.append(f"\nOut of budget, not run: {', '.join(r['skipped'])}.")
        self.md.append("\n".join(lines) + "\n")

    def optuna_path(self):
        """Optuna for this Python: installed, or unpacked from the bundle's wheels."""
        probe = subprocess.run([sys.executable, "-c", "import optuna, numpy"], capture_output=True)
        if probe.returncode == 0:
            return None
        dest = self.tmp / "pydeps"
        dest.mkdir(exist_ok=True)
        tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
        for w in sorted((BUNDLE / "py").glob("*.whl")):
            if "none-any" in w.name or tag in w.name:
                with zipfile.ZipFile(w) as z:
                    z.extractall(dest)
        probe = subprocess.run([sys.executable, "-c", "import optuna, numpy"], capture_output=True, text=True,
                               env={**self.env, "PYTHONPATH": str(dest)})
        if probe.returncode != 0:
            raise RuntimeError("Optuna cannot be imported here, and the bundle's wheels do not fit this Python "
                               f"({tag}): {probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else ''}")
        return str(dest)

    def s_oom(self, r):
        space = """
[space]
lr = { type = "float", low = 1e-4, high = 1e-2, log = true }
width = { type = "int", low = 64, high = 131072, log = true }
"""
        d = self.study("oom", self.builtin_study("oom", "slots_per_device = 2\ngpu_memory_fraction = 0.4",
                                                 extra_study="trials = 8", space=space, trial_extra='optimizer = "adam"\n'))
        # A normal trial first, so that it runs in the other slot while the huge one fails: an MLP
        # of width 65536 needs about 70 GB for its weights, gradients and Adam moments, over the cap.
        for p in ('{"lr": 0.001, "width": 256}', '{"lr": 0.001, "width": 65536}'):
            self.run("oom", [self.tune, "--db", str(d / "tune.db"), "enqueue", str(d / "study.toml"), "--params", p], 30)
        rc, out, t0, t1 = self.run("oom", [self.tune, "--db", str(d / "tune.db"), "run", str(d / "study.toml"), "--no-tui"], 150)
        ts = self.trials(d)
        big = [t for t in ts if t["params"].get("width") == 65536]
        others = [t for t in ts if t["params"].get("width") != 65536]
        big_failed_oom = bool(big) and big[0]["state"] == "failed" and "memory" in (big[0].get("error") or "").lower()
        first = next((t for t in others if t["params"].get("width") == 256), None)
        overlap = bool(first and big and first.get("started_at") and big[0].get("finished_at") and first.get("finished_at")
                       and first["started_at"] <= big[0]["finished_at"] <= first["finished_at"])
        complete = sum(1 for t in others if t["state"] == "complete")
        # Adam without dropout: the trainer's CUDA-graph path should have captured these.
        graphs = sum(1 for t in others if (t.get("metrics") or {}).get("cuda_graphs") == 1)
        r["trials_on_cuda_graphs"] = graphs
        r.update({"rc": rc, "big": big[0] if big else None, "others_complete": complete, "others": len(others),
                  "oom_failed_that_trial": big_failed_oom, "other_slot_ran_through_it": overlap})
        # The budget counts the failed trial, so one queued trial may be left unrun: none may fail.
        r["others_states"] = sorted(t["state"] for t in others)
        # A random width past ~50 000 is over the cap too: such a trial must fail as out of memory
        # like the enqueued one, and every trial under it complete.
        def over_cap(t):
            return t["params"].get("width", 0) > 50000
        wrong = [t["number"] for t in others if t["state"] in ("complete", "failed") and (t["state"] == "failed") != over_cap(t)
                 or (t["state"] == "failed" and "memory" not in (t.get("error") or "").lower())]
        r["wrong"] = wrong
        ok = big_failed_oom and overlap and not wrong and rc in (0, 1)
        r["status"] = "ok" if ok else "failed"
        self.md.append("## Out of memory in one slot\n\n"
                       "Builtin study on `cuda:0`, `slots_per_device = 2`, `gpu_memory_fraction = 0.4`, 8 trials; enqueued first a "
                       "normal MLP (width 256), then one of width 65536 (about 70 GB with Adam, over the 40 % cap).\n\n"
                       f"- the huge trial: {big[0]['state'] if big else 'missing'}: `{(big[0].get('error') or '')[:300] if big else ''}`\n"
                       f"- the other slot's trial was running when it failed: {overlap}\n"
                       f"- the other {len(others)} trials: {complete} complete, states {r['others_states']} ({graphs} trained on CUDA graphs, `cuda_graphs = 1`); `tune run` exit {rc}\n"
                       f"- trials whose outcome does not fit their width (a failure under the cap, or a trial over it that did not fail as out of memory): {wrong or 'none'}\n"
                       f"- {'PASS' if ok else 'FAIL'}\n")

    def s_telemetry(self, r):
        """Per-trial GPU telemetry as stored (scripts/gpu-telemetry-check.sh: two command trials sharing
        the GPU, their own memory peaks), and the `gpu` objects the builtin studies above stored."""
        env = dict(self.env, TUNE=str(self.tune), PYTHON=sys.executable)
        rc, out, _, _ = self.run("telemetry", ["bash", "scripts/gpu-telemetry-check.sh", str(self.out / "telemetry")], 90, env=env)
        r["rc"] = rc
        md = self.out / "telemetry" / "telemetry.md"
        text = md.read_text() if md.is_file() else out.strip()[-2000:]
        builtin = []
        for name in ("oom", "tp2"):
            d = self.tmp / name
            if (d / "tune.db").is_file():
                for t in self.trials(d)[:4]:
                    builtin.append(f"| {name} | {t['number']} | {t['state']} | `{json.dumps(t.get('gpu'))}` | "
                                   f"{(t.get('metrics') or {}).get('peak_mem_mb')} |")
        r["builtin"] = builtin
        r["status"] = "ok" if rc == 0 else "failed"
        self.md.append("## Per-trial GPU telemetry\n\n`scripts/gpu-telemetry-check.sh` (exit " + str(rc) + "):\n\n" + text.strip()
                       + "\n\nStored by the builtin studies above (`gpu` of `tune trials --format json`; the trainer's own "
                       "`peak_mem_mb` metric beside it):\n\n| study | trial | state | gpu | peak_mem_mb |\n| --- | ---: | --- | --- | ---: |\n"
                       + "\n".join(builtin) + "\n")

    @staticmethod
    def nvml_seen(frame):
        """The workers table's `gpu sm mem` column with a figure in it (`  99% 1.0G`)."""
        return "gpu sm mem" in frame and bool(re.search(r"\d+% +\d+(\.\d)?[MGT]", frame))

    def s_ui(self, r):
        tmux = shutil.which("tmux")
        env = dict(self.env)
        if not tmux and (BUNDLE / "bin/tmux").is_file():
            tmux = str(BUNDLE / "bin/tmux")
            env["LD_LIBRARY_PATH"] = str(BUNDLE / "lib") + ":" + env["LD_LIBRARY_PATH"]
        if not tmux:
            raise RuntimeError("no tmux here and none in gpu-bundle/")
        # Long enough to be caught running: trials take a second or two on a GPU.
        d = self.study("ui", self.builtin_study("ui", "slots_per_device = 2", extra_study='trials = 4\ntimeout = "20s"', epochs=15))
        sock = str(self.tmp / "tmux.sock")
        cmd = f"cd {d} && {self.tune} --db {d / 'tune.db'} run study.toml; sleep 30"
        subprocess.run([tmux, "-S", sock, "new-session", "-d", "-x", "160", "-y", "48", cmd], env=env, check=True)
        best = ""
        deadline = time.time() + 40
        try:
            while time.time() < deadline:
                time.sleep(1)
                cap = subprocess.run([tmux, "-S", sock, "capture-pane", "-p"], env=env, capture_output=True, text=True).stdout
                with open(self.raw / "ui-frames.txt", "a") as f:
                    f.write(f"--- {time.time() - self.t0:.1f} s\n{cap}\n")
                if self.nvml_seen(cap):
                    best = cap
                    time.sleep(2)
                    best = subprocess.run([tmux, "-S", sock, "capture-pane", "-p"], env=env, capture_output=True, text=True).stdout
                    break
                best = cap or best
        finally:
            subprocess.run([tmux, "-S", sock, "kill-server"], env=env, capture_output=True)
        (self.out / "ui.txt").write_text(best)
        ok = self.nvml_seen(best)
        r["status"] = "ok" if ok else "failed"
        r["nvml_in_ui"] = ok
        self.md.append("## NVML figures in the live UI (tmux capture, 160×48)\n\n"
                       f"{'GPU column with SM % and memory seen' if ok else 'NO GPU figures seen'}; the capture (ui.txt):\n\n```\n"
                       + best.rstrip() + "\n```\n")

    def s_stream(self, r):
        r["runs"] = []
        for cache in ("always", "never"):
            d = self.study(f"stream-{cache}", self.builtin_study(
                f"stream-{cache}", "slots_per_device = 1", extra_study="trials = 2",
                space='[space]\ndropout = { type = "float", low = 0.0, high = 0.1 }\n',
                data_extra=f'device_cache = "{cache}"\n', trial_extra='lr = 0.001\nbatch_size = 128\noptimizer = "adam"\n'))
            rc, out, t0, t1 = self.run(f"stream-{cache}", [self.tune, "--db", str(d / "tune.db"), "run", str(d / "study.toml"), "--no-tui"], 120)
            ts = [t for t in self.trials(d) if t["state"] == "complete"]
            m = [t.get("metrics") or {} for t in ts]
            r["runs"].append({"device_cache": cache, "rc": rc, "complete": len(ts),
                              "samples_per_s": [round(x["samples_per_s"]) for x in m if x.get("samples_per_s") is not None],
                              "data_wait": [round(x["data_wait"], 3) for x in m if x.get("data_wait") is not None]})
        # The loader itself: the streamed batches checked equal to the host loader's on the device
        # (pinned, copied on the loader's stream), then streamed against in-memory.
        cmd = [self.worker, "bench", "--stream", "--device", self.device, "--models", "mlp,cnn,resnet", "--amp", "off,bf16",
               "--steps", "200", "--repeat", "2", "--no-python"]
        rc, out, _, _ = self.run("stream-bench", cmd, 120)
        r["bench_rc"] = rc
        if rc != 0:
            r["status"] = "failed"
        lines = ["## Streaming loader (data larger than `max_device_mb`, forced by `device_cache = \"never\"`)\n",
                 "`" + " ".join(str(c) for c in cmd[1:]) + "` (exit " + str(rc) + "):\n\n```\n" + out.strip()[-2500:] + "\n```\n",
                 "And in a study:\n",
                 "MLP on Fashion-MNIST, batch 128, Adam, 1 epoch, 2 trials each; the last report's `samples_per_s` and `data_wait` "
                 "(the fraction of training time spent waiting for a batch).\n",
                 "| device_cache | samples/s | data_wait |", "| --- | --- | --- |"]
        for x in r["runs"]:
            lines.append(f"| {x['device_cache']} | {', '.join(map(str, x['samples_per_s']))} | {', '.join(map(str, x['data_wait']))} |")
        self.md.append("\n".join(lines) + "\n")

    # ---- issue 27: trial checkpoints on the GPU ----
    FIXED = 'lr = 0.001\nbatch_size = 128\noptimizer = "adam"\n'
    ONE_PARAM = '[space]\ndropout = { type = "float", low = 0.0, high = 0.2 }\n'

    def ck_study(self, name, model, epochs, trials, checkpoints, extra_study="", study_name=None):
        """A builtin study of fixed params but the dropout, with or without trial checkpoints."""
        text = self.builtin_study(study_name or name, "slots_per_device = 1", extra_study=f"trials = {trials}\n{extra_study}",
                                  space=self.ONE_PARAM, epochs=epochs,
                                  trial_extra=self.FIXED + f"checkpoints = {'true' if checkpoints else 'false'}\n")
        model_table = 'kind = "mlp"\ndepth = 2\nwidth = 128' if model == "mlp" else f'kind = "{model}"'
        text = text.replace('kind = "mlp"\ndepth = 2', model_table)
        return self.study(name, text)

    def s_resume(self, r):
        """Issue 27 on CUDA: what a checkpoint per epoch costs (the trainer's own `checkpoint_s`
        against the trial's time, and trials with checkpoints against trials without), and a
        builtin trial killed (kill -9 of tune) mid-run and resumed from its checkpoint."""
        epochs = 6
        r["overhead"] = []
        # The ResNet only where it trains in seconds (a CPU rehearsal would time out).
        for model in ("mlp", "resnet") if self.device.startswith("cuda") else ("mlp",):
            row = {"model": model}
            # ABBA, so that a drift (and the first run's cold caches) hits both sides alike;
            # each run's first trial (the worker's start) is left out.
            for i, ck in enumerate((False, True, True, False)):
                name = f"ck-{model}-{'on' if ck else 'off'}-{i}"
                d = self.ck_study(name, model, epochs, 3, ck)
                rc, out, _, _ = self.run(name, [self.tune, "--db", str(d / "tune.db"), "run", str(d / "study.toml"), "--no-tui"], 150)
                ts = [t for t in self.trials(d) if t["state"] == "complete" and t["number"] > 0]
                if rc != 0 or not ts:
                    raise RuntimeError(f"{name}: exit {rc}, {len(ts)} complete: {out.strip()[-400:]}")
                row.setdefault("on" if ck else "off", []).extend(t["duration_s"] for t in ts)
                if ck:
                    # checkpoint_s at the last report counts the saves of epochs 1..E-1 (the last
                    # epoch's save comes after it): per save, times the E saves of a trial.
                    for t in ts:
                        m = t.get("metrics") or {}
                        if m.get("checkpoint_s") is not None:
                            row.setdefault("save_s", []).append(m["checkpoint_s"] / (epochs - 1))
            mean = lambda xs: sum(xs) / len(xs)
            row["trial_s_on"], row["trial_s_off"] = round(mean(row["on"]), 3), round(mean(row["off"]), 3)
            row["ab_overhead_pct"] = round(100 * (row["trial_s_on"] / row["trial_s_off"] - 1), 2)
            if row.get("save_s"):
                row["save_ms"] = round(1000 * mean(row["save_s"]), 2)
                row["metric_overhead_pct"] = round(100 * epochs * mean(row["save_s"]) / row["trial_s_on"], 2)
            r["overhead"].append(row)

        # Kill -9 of tune in epoch 3 of 6; the next `tune run` runs the trial again as its attempt 2,
        # which resumes from the checkpoint; its final loss against an uninterrupted run's.
        ref = self.ck_study("resume-ref", "mlp", epochs, 1, True, study_name="resume")  # same name: same seeds
        rc, out, _, _ = self.run("resume-ref", [self.tune, "--db", str(ref / "tune.db"), "run", str(ref / "study.toml"), "--no-tui"], 120)
        ref_t = [t for t in self.trials(ref) if t["state"] == "complete"]
        d = self.ck_study("resume", "mlp", epochs, 1, True, extra_study="")
        log = open(self.raw / "resume-run1.log", "w")
        p = subprocess.Popen([self.tune, "--db", str(d / "tune.db"), "run", str(d / "study.toml"), "--no-tui"],
                             cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        killed_at = None
        deadline = time.time() + 90
        while time.time() < deadline and p.poll() is None:
            time.sleep(0.05)
            try:
                ts = self.trials(d)
            except Exception:
                continue
            ep = [(t.get("metrics") or {}).get("epoch") for t in ts if t["state"] == "running"]
            if ep and ep[0] is not None and ep[0] >= 3:
                p.kill()  # SIGKILL: no goodbye, as a lost machine
                killed_at = ep[0]
                break
        p.wait(timeout=30)
        log.close()
        r["killed_at_epoch"] = killed_at
        time.sleep(0.5)
        rc2, out2, _, _ = self.run("resume-run2", [self.tune, "--db", str(d / "tune.db"), "run", str(d / "study.toml"), "--no-tui"], 120)
        ts = self.trials(d)
        rerun = [t for t in ts if t["state"] == "complete"]
        r["resume"] = {"ref_rc": rc, "run2_rc": rc2, "trials": [(t["number"], t["state"]) for t in ts]}
        if rerun and ref_t:
            n = rerun[0]["number"]
            sp = subprocess.run([self.tune, "--db", str(d / "tune.db"), "show", str(n), str(d / "study.toml"), "--format", "json"],
                                cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=30)
            (self.raw / "resume-show.json").write_text(sp.stdout + sp.stderr)
            shown = json.loads(sp.stdout)
            steps = [x["step"] for x in shown.get("reports", [])]
            r["resume"].update({
                "attempt": shown.get("attempt"), "retry_of": shown.get("retry_of"), "report_steps": steps,
                "first_report_epoch": (shown["reports"][0]["metrics"].get("epoch") if shown.get("reports") else None),
                "val_loss": rerun[0]["value"], "ref_val_loss": ref_t[0]["value"],
                "rel_diff": abs(rerun[0]["value"] - ref_t[0]["value"]) / abs(ref_t[0]["value"]),
            })
        lines = ["## Trial checkpoints (issue 27)\n",
                 f"Builtin studies on {self.device}, {epochs} epochs, batch 128, Adam, 3 trials per run (the first, which "
                 "starts the worker, left out), a checkpoint at every epoch's end (`[trial] checkpoints = true`, the "
                 "default) against `checkpoints = false`, runs in the order off, on, on, off. `save ms`: the trainer's own `checkpoint_s` per save; `metric %`: the saves' share of "
                 "the trial's time; `A/B %`: trial time with checkpoints over without, minus 1.\n",
                 "| model | trial s (on) | trial s (off) | A/B % | save ms | metric % |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for x in r["overhead"]:
            lines.append(f"| {x['model']} | {x['trial_s_on']} | {x['trial_s_off']} | {x['ab_overhead_pct']} | "
                         f"{x.get('save_ms', '-')} | {x.get('metric_overhead_pct', '-')} |")
        lines.append(f"\nKill -9 of `tune run` at epoch {killed_at} of {epochs}, then `tune run` again: `{json.dumps(r['resume'])}`\n")
        self.md.append("\n".join(lines) + "\n")

    # ---- the whole ----
    def main(self):
        self.find_binaries()
        plan = [("env", 5, self.s_env), ("setup", 20, self.s_setup), ("bench", 100, self.s_bench),
                ("graphs", 50, self.s_graphs), ("throughput", 6 * (self.args.window + 15), self.s_throughput),
                ("oom", 45, self.s_oom), ("telemetry", 35, self.s_telemetry), ("ui", 45, self.s_ui), ("checkpointing", 40, self.s_checkpointing),
                ("stream", 70, self.s_stream), ("bench1024", 60, self.s_bench1024), ("resume", 120, self.s_resume)]
        for name, est, fn in plan:
            self.step(name, est, fn)
        self.smi.stop()
        self.results["seconds"] = round(time.time() - self.t0, 1)
        statuses = {k: v.get("status") for k, v in self.results["steps"].items()}
        head = ["# tune GPU check", "",
                f"{self.results['started']}, {self.results['seconds']} s of a {self.budget:.0f} s budget. Steps: "
                + ", ".join(f"{k} {v}" for k, v in statuses.items()) + ".", ""]
        (self.out / "report.md").write_text("\n".join(head + self.md))
        (self.out / "report.json").write_text(json.dumps(self.results, indent=1, default=str))
        print(f"gpu-check: report in {self.out / 'report.md'} ({self.results['seconds']} s)", flush=True)
        return 0 if all(s == "ok" for s in statuses.values()) else 1


def main():
    ap = argparse.ArgumentParser(prog="scripts/gpu-check.sh", description="every GPU check of tune in one call")
    ap.add_argument("outdir")
    ap.add_argument("--budget", type=float, default=480, help="seconds for the whole check (default 480)")
    ap.add_argument("--window", type=int, default=30, help="seconds each throughput run is given (default 30)")
    ap.add_argument("--device", default="cuda:0",
                    help="where trials train (default cuda:0); `--device cpu` rehearses the wiring on a machine without a GPU")
    ap.add_argument("--bin-dir", help="take tune and tune-worker from this folder")
    ap.add_argument("--only", type=lambda s: [x for x in s.split(",") if x], default=[],
                    help="run only these steps: " + ",".join(STEPS))
    args = ap.parse_args()
    bad = [s for s in args.only if s not in STEPS]
    if bad:
        ap.error(f"--only: unknown step {', '.join(bad)} (steps: {', '.join(STEPS)})")
    return Check(args).main()


if __name__ == "__main__":
    sys.exit(main())
