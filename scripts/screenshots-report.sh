#!/usr/bin/env bash
# Makes docs/screenshots/report.png, the picture in docs/report.md: runs a small real study (30
# command trials with learning curves, a median pruner, a few failures), writes its report with
# `tune report` and has headless Chromium (Debian's `chromium`, which
# `scripts/setup.sh --python-tests` installs) take a screenshot of the page's top.
#   TUNE=target/release/tune scripts/screenshots-report.sh
set -euo pipefail
cd "$(dirname "$0")/.."
TUNE=$(realpath "${TUNE:-target/release/tune}")
CHROMIUM=${CHROMIUM:-chromium}
out="$PWD/docs/screenshots/report.png"
work=$(mktemp -d /tmp/tune-report-shot.XXXXXX)
trap 'rm -rf "$work"' EXIT

cat > "$work/study.toml" <<'TOML'
[study]
name = "report-demo"
metric = "loss"
trials = 30
seed = 7

[space]
lr = { type = "float", low = 1e-4, high = 1e-1, log = true }
layers = { type = "int", low = 1, high = 4 }
optimizer = { type = "categorical", choices = ["sgd", "adam"] }

[pruner]
kind = "median"
warmup_steps = 2

[workers]
count = 3
devices = ["cpu"]

[trial]
kind = "command"
command = ["sh", "trial.sh", "{lr}", "{layers}", "{optimizer}"]
TOML

# A training-shaped curve: the loss falls with the steps, lowest near lr = 0.01 with adam; four
# layers with sgd diverge (a failed trial with a reason).
cat > "$work/trial.sh" <<'SH'
if [ "$2" = 4 ] && [ "$3" = sgd ]; then echo "RuntimeError: loss diverged at step 3" >&2; exit 1; fi
for s in 0 1 2 3 4 5 6 7 8 9; do
  v=$(awk -v lr="$1" -v l="$2" -v o="$3" -v s="$s" 'BEGIN { x = log(lr)/log(10) + 2; b = 0.2 + 0.3*x*x + 0.03*l + (o == "sgd" ? 0.15 : 0); print b * (1 + 2/(s+1)) }')
  echo "tune: {\"step\": $s, \"loss\": $v}"
  sleep 0.05
done
SH

(cd "$work" && "$TUNE" run study.toml --no-tui >/dev/null)
"$TUNE" report "$work/study.toml" -o "$work/report.html"
"$CHROMIUM" --headless --disable-gpu --no-sandbox --no-first-run --hide-scrollbars \
  --user-data-dir="$work/profile" --window-size=1000,1900 \
  --screenshot="$out" "file://$work/report.html" 2>/dev/null
echo "screenshot in $out ($(wc -c < "$out") bytes)"
