#!/bin/sh
# Makes the README's screenshots (docs/tui-*.png) from a real run of demo.toml (a builtin
# study: tune-worker must sit beside tune, and a release build trains fast enough for the
# timings below) under tmux: capture-pane -e gives the screen with its colours, ansi2png.py
# draws it (PYTHON: a python with Pillow).
#   TUNE=target/release/tune PYTHON=.venv/bin/python docs/screenshots/make.sh
set -eu
TUNE=$(realpath "${TUNE:-target/release/tune}")
PYTHON=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
out=$(cd "$here/.." && pwd)
# A short directory: the trial screen's log path then fits its column whole.
work=$(mktemp -d /tmp/t.XXX)
cp "$here/demo.toml" "$work/"
s="tune-shots-$$"
trap 'tmux kill-session -t "$s" 2>/dev/null || true' EXIT
tmux new-session -d -s "$s" -x 120 -y 36 -c "$work" "$TUNE demo.toml; sleep 600"
shot() { tmux capture-pane -e -p -t "$s" > "$work/$1.ans"; "$PYTHON" "$here/ansi2png.py" "$work/$1.ans" "$out/$1.png" "$2" "$3"; }
keys() { for k in "$@"; do tmux send-keys -t "$s" "$k"; sleep 0.3; done; }

# Mid-run: four trials training (epoch bars), ASHA's pruned trials among the finished ones.
sleep 44
shot tui-running 120 36
# Sorted by value, the first row opened: the best trial, or a running one ahead of it (its
# curve against the best's).
keys 3 Enter
sleep 1
shot tui-trial 120 36
keys Escape 1
tmux resize-window -t "$s" -x 80 -y 24
sleep 2
shot tui-80x24 80 24
keys '?'
sleep 1
shot tui-help 80 24
# The slots' timeline mid-run (the insight screen's fourth view). The first key closes the
# help.
keys '?' i Tab Tab Tab
sleep 1
shot tui-timeline 80 24
# The insight screen (i) once the study is done, so that the importances have complete trials
# to learn from: the importances beside the slice of the most important parameter.
keys Escape
sleep 40
keys i Tab
sleep 1
shot tui-insight 80 24
keys Escape q s
sleep 3
echo "screenshots in $out"
