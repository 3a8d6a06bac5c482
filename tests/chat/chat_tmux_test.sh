#!/usr/bin/env bash
# kairox-chat driven through tmux like a person would: two turns with the
# default model, an answer stopped with Ctrl-C, /stats, /exit; then the
# screen is checked. Skips (77) without tmux or the model.
#
#   chat_tmux_test.sh path/to/kairox-chat path/to/model.gguf
set -euo pipefail
chat=$1
model=$2
command -v tmux >/dev/null || { echo "SKIPPED: tmux not installed (cmake/install_deps.sh adds it)"; exit 77; }
[[ -f $model ]] || { echo "SKIPPED: no model at $model (run cmake/fetch_model.sh)"; exit 77; }

sock="kx-chat-test-$$"
tm() { tmux -L "$sock" "$@"; }
trap 'tm kill-server 2>/dev/null || true' EXIT
screen() { tm capture-pane -p -J -S -200 -t chat; }
# wait_for COUNT PATTERN: until PATTERN (grep -E) matches COUNT lines of the screen.
wait_for() {
  local count=$1 pattern=$2
  for _ in $(seq 1 600); do
    if (( $(screen | grep -cE -- "$pattern" || true) >= count )); then return 0; fi
    sleep 0.1
  done
  echo "FAIL: timed out waiting for $count line(s) matching '$pattern'; the screen:"
  screen
  exit 1
}

tm new-session -d -s chat -x 160 -y 50 \
  "'$chat' -m '$model' --temp 0 -t 2 -c 2048; echo KAIROX_CHAT_EXITED rc=\$?; sleep 60"
wait_for 1 '^> $'
tm send-keys -t chat "What is the capital of France?" Enter
wait_for 2 '^> '
tm send-keys -t chat "What is the capital of Germany?" Enter
wait_for 3 '^> '
# Ctrl-C during an answer stops the answer, not the program.
tm send-keys -t chat "Write a very long story about a dragon and a knight." Enter
sleep 0.3
tm send-keys -t chat C-c
wait_for 1 '\[answer stopped\]'
wait_for 4 '^> '
tm send-keys -t chat "/stats" Enter
wait_for 1 '^\[context [0-9]+/2048 tokens'
tm send-keys -t chat "/exit" Enter
wait_for 1 'KAIROX_CHAT_EXITED rc=0'

out=$(screen)
echo "$out"
fail=0
check() { grep -qE -- "$1" <<<"$out" || { echo "FAIL: the screen lacks '$1'"; fail=1; }; }
check '^kairox-chat .*\(chatml template'
check '^> What is the capital of France\?'
check 'Paris'
check '^> What is the capital of Germany\?'
check 'Berlin'
check '^> Write a very long story'
check '^\[context [0-9]+/2048 tokens, 6 messages'
exit $fail
