#!/bin/sh
# Makes the README's screenshots (docs/tui-*.png) from a real run of demo.toml under tmux:
# capture-pane -e gives the screen with its colours, ansi2png.py draws it.
#   TUNE=target/debug/tune docs/screenshots/make.sh
set -eu
TUNE=$(realpath "${TUNE:-target/debug/tune}")
here=$(cd "$(dirname "$0")" && pwd)
out=$(cd "$here/.." && pwd)
work=$(mktemp -d)
cp "$here/demo.toml" "$work/"
s="tune-shots-$$"
trap 'tmux kill-session -t "$s" 2>/dev/null || true' EXIT
tmux new-session -d -s "$s" -x 120 -y 36 -c "$work" "$TUNE demo.toml; sleep 600"
shot() { tmux capture-pane -e -p -t "$s" > "$work/$1.ans"; python3 "$here/ansi2png.py" "$work/$1.ans" "$out/$1.png" "$2" "$3"; }
keys() { for k in "$@"; do tmux send-keys -t "$s" "$k"; sleep 0.3; done; }

sleep 14
# Stop one running trial by hand, recorded as pruned: the steering, and a pruned mark.
keys f x p f f f f
sleep 22
shot tui-running 120 36
# The best trial first, then open it.
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
keys '?' q s
sleep 3
echo "screenshots in $out"
