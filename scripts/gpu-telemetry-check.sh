#!/usr/bin/env bash
# The GPU check of per-trial telemetry (issue 31), one part of scripts/gpu-check.sh: two command
# trials at once on cuda:0 (slots_per_device = 2), one holding 1 GiB more than the other for
# ~8 s, then what tune stored of each: the `gpu` object of `tune trials --format json`, whose
# memory peak must be the trial's own (scope "process", the two peaks 2 GiB apart) and not the
# whole GPU's, the Optuna user attributes, `tune show` and the trials table.
#
#   scripts/gpu-telemetry-check.sh OUTDIR
#
# Environment: TUNE (the tune binary; default: `tune` on PATH, else target/release/tune),
# PYTHON (a Python whose torch sees the GPU; default python3).
# Writes OUTDIR/telemetry.json ({"ok": …, "checks": […], "trials": […]}) and OUTDIR/telemetry.md,
# and the study's files under OUTDIR/telemetry-study/. Exit status: 0 every check passed, 1 one
# failed, 2 no GPU or no torch with CUDA here (at once, saying why).
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: scripts/gpu-telemetry-check.sh OUTDIR" >&2
  exit 2
fi
out=$1
root=$(cd "$(dirname "$0")/.." && pwd)

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-telemetry-check: no NVIDIA GPU here (nvidia-smi is missing or sees no GPU)" >&2
  exit 2
fi
py=${PYTHON:-python3}
if ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu-telemetry-check: $py has no torch that sees the GPU; set PYTHON to one that does" >&2
  exit 2
fi
py=$(command -v "$py")
tune=${TUNE:-}
if [ -z "$tune" ]; then
  tune=$(command -v tune || echo "$root/target/release/tune")
fi
if [ ! -x "$tune" ]; then
  echo "gpu-telemetry-check: no tune binary at $tune; set TUNE" >&2
  exit 2
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
dir="$out/telemetry-study"
rm -rf "$dir"
mkdir -p "$dir"

cat >"$dir/trial.py" <<'EOF'
# Holds MB MiB of GPU memory beside a busy matmul loop for SECONDS, then reports.
import sys, time, torch
mb, seconds = int(sys.argv[1]), float(sys.argv[2])
held = torch.empty(mb * 1024 * 1024, dtype=torch.uint8, device="cuda")
a = torch.randn(2048, 2048, device="cuda")
t0 = time.time()
while time.time() - t0 < seconds:
    for _ in range(20):
        a = torch.tanh(a @ a)
    torch.cuda.synchronize()
print('tune: {"step": 0, "loss": %.6f, "held_mb": %d}' % (float(a.abs().mean()), mb), flush=True)
EOF

cat >"$dir/study.toml" <<EOF
[study]
name = "gpu-telemetry"
metric = "loss"
trials = 2

[space]
mb = { type = "int", low = 512, high = 4096 }

[workers]
devices = ["cuda:0"]
slots_per_device = 2

[trial]
kind = "command"
command = ["$py", "trial.py", "{mb}", "8"]

[[enqueue]]
mb = 1024

[[enqueue]]
mb = 3072
EOF

t0=$(date +%s)
(cd "$dir" && timeout 180 "$tune" run study.toml --no-tui) >"$dir/run.log" 2>&1 || {
  echo "gpu-telemetry-check: the study failed; see $dir/run.log" >&2
  tail -20 "$dir/run.log" >&2
  exit 1
}
(cd "$dir" && "$tune" trials study.toml --format json) >"$dir/trials.json"
(cd "$dir" && "$tune" trials study.toml) >"$dir/trials.txt"
(cd "$dir" && "$tune" trials study.toml --format csv) >"$dir/trials.csv"
(cd "$dir" && "$tune" show 0 study.toml) >"$dir/show-0.txt"
(cd "$dir" && "$tune" show 1 study.toml) >"$dir/show-1.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$dir/gpu.txt" || true
elapsed=$(( $(date +%s) - t0 ))

"$py" - "$dir" "$out" "$elapsed" <<'EOF'
import json, sqlite3, sys
d, out, elapsed = sys.argv[1], sys.argv[2], int(sys.argv[3])
trials = json.load(open(f"{d}/trials.json"))
by_mb = {t["params"]["mb"]: t for t in trials}
checks = []
def check(name, ok, detail):
    checks.append({"check": name, "ok": bool(ok), "detail": detail})
check("both trials complete", all(t["state"] == "complete" for t in trials) and len(trials) == 2,
      [t["state"] for t in trials])
gpu = {mb: t.get("gpu") for mb, t in by_mb.items()}
check("each trial stored GPU telemetry", all(gpu.values()), gpu)
if all(gpu.values()):
    small, big = gpu[1024], gpu[3072]
    check("the memory peak is each trial's own processes' (scope process)",
          small["mem_scope"] == "process" and big["mem_scope"] == "process",
          [small["mem_scope"], big["mem_scope"]])
    diff = big["peak_mem_mb"] - small["peak_mem_mb"]
    check("the two peaks differ by the 2 GiB the trials held apart (1700 to 2400 MB)",
          1700 <= diff <= 2400, round(diff, 1))
    check("the 1 GiB trial's peak is its 1 GiB plus at most 1.5 GB of context and cache",
          1024 <= small["peak_mem_mb"] <= 2560, small["peak_mem_mb"])
    check("at least 4 samples each (8 s of work, one a second)",
          min(small["samples"], big["samples"]) >= 4, [small["samples"], big["samples"]])
    check("mean SM use above 0", min(small["mean_sm_pct"], big["mean_sm_pct"]) > 0,
          [small["mean_sm_pct"], big["mean_sm_pct"]])
    check("mean memory-bandwidth use is a percentage",
          all(0 <= g["mean_mem_bw_pct"] <= 100 for g in (small, big)),
          [small["mean_mem_bw_pct"], big["mean_mem_bw_pct"]])
db = sqlite3.connect(f"{d}/tune.db")
attrs = dict(db.execute(
    "SELECT a.key, a.value_json FROM trial_user_attributes a JOIN trials t USING (trial_id) "
    "WHERE t.number = 0 AND a.key LIKE 'gpu%'").fetchall())
check("Optuna user attributes gpu_* of trial 0",
      set(attrs) == {"gpu_peak_mem_mb", "gpu_mem_scope", "gpu_mean_sm_pct",
                     "gpu_mean_mem_bw_pct", "gpu_samples"}, attrs)
table = open(f"{d}/trials.txt").read()
check("the trials table has the GPU columns", "gpu peak" in table and "gpu mem bw" in table, "")
show = open(f"{d}/show-0.txt").read()
check("tune show names the GPU figures", "gpu memory peak:" in show, "")
ok = all(c["ok"] for c in checks)
gpu_name = open(f"{d}/gpu.txt").read().strip()
json.dump({"ok": ok, "gpu": gpu_name, "seconds": elapsed, "checks": checks, "trials": trials},
          open(f"{out}/telemetry.json", "w"), indent=2)
with open(f"{out}/telemetry.md", "w") as f:
    f.write(f"## Per-trial GPU telemetry ({gpu_name}, {elapsed} s)\n\n")
    f.write("Two command trials at once on cuda:0, holding 1 GiB and 3 GiB.\n\n")
    f.write("| check | ok | detail |\n| --- | --- | --- |\n")
    for c in checks:
        f.write(f"| {c['check']} | {'yes' if c['ok'] else '**no**'} | `{json.dumps(c['detail'])}` |\n")
    f.write("\n```\n" + table + "```\n")
print(open(f"{out}/telemetry.md").read())
sys.exit(0 if ok else 1)
EOF
