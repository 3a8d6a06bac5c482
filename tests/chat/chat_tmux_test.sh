#!/usr/bin/env bash
# kairox-chat driven through tmux like a person would: two turns with the
# default model, the first one edited with libedit before it is sent (typed
# with a gap, the cursor moved left, the gap filled); Ctrl-C at the prompt (the
# typed line is dropped); Ctrl-C while a long prompt is still being read (the
# turn is dropped, the context is as before it); /stats recalled with the Up
# arrow; Ctrl-C during an answer (the answer stops, the program does not);
# Ctrl-D on an empty line quits; then the screen is checked. A second session
# finds the first one's lines in its history (Up), a third with
# KAIROX_CHAT_HISTORY=off writes none.
# Each Ctrl-C is sent once the screen shows the phase it targets (the prompt's
# progress line, then the answer's first words), never after a sleep.
# Skips (77) without tmux or the model.
#
#   chat_tmux_test.sh path/to/kairox-chat path/to/model.gguf
set -euo pipefail
chat=$1
model=$2
command -v tmux >/dev/null || { echo "SKIPPED: tmux not installed (cmake/install_deps.sh adds it)"; exit 77; }
[[ -f $model ]] || { echo "SKIPPED: no model at $model (run cmake/fetch_model.sh)"; exit 77; }

sock="kx-chat-test-$$"
tm() { tmux -L "$sock" "$@"; }
state=$(mktemp -d)  # XDG_STATE_HOME: the history goes to $state/kairox/chat_history
trap 'tm kill-server 2>/dev/null || true; rm -rf "$state"' EXIT
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
# wait_until WHAT COMMAND...: until COMMAND succeeds.
wait_until() {
  local what=$1
  shift
  for _ in $(seq 1 600); do
    if "$@"; then return 0; fi
    sleep 0.1
  done
  echo "FAIL: timed out waiting for $what; the screen:"
  screen
  exit 1
}
# The last /stats line's "N/2048 tokens, M messages".
last_stats() { screen | grep -oE '^\[context [0-9]+/2048 tokens, [0-9]+ messages' | tail -1; }
# The story's answer has begun: a line after its prompt with words, not the progress line.
story_started() {
  screen | sed -n '/^> Write a very long story/,$p' | sed 1d | grep -v 'reading the prompt' |
    grep -q '[[:alpha:]]'
}

tm new-session -d -s chat -x 160 -y 50 -e "XDG_STATE_HOME=$state" \
  "'$chat' -m '$model' --temp 0 -t 2 -c 2048; echo KAIROX_CHAT_EXITED rc=\$?; sleep 60"
wait_for 1 '^> $'
# Line editing: "France" typed into the gap before the "?" (Left moves the cursor back).
tm send-keys -t chat -l "What is the capital of ?"
tm send-keys -t chat Left
tm send-keys -t chat -l "France"
tm send-keys -t chat Enter
wait_for 2 '^> '
tm send-keys -t chat "What is the capital of Germany?" Enter
wait_for 3 '^> '
tm send-keys -t chat "/stats" Enter
wait_for 1 '^\[context [0-9]+/2048 tokens'
wait_for 4 '^> '
before=$(last_stats)

# Ctrl-C at the prompt drops the typed line and gives a fresh prompt.
tm send-keys -t chat -l "this line is never sent"
wait_for 1 '^> this line is never sent'
tm send-keys -t chat C-c
wait_for 1 '^\(Ctrl-C stops an answer'
wait_for 5 '^> '

# Ctrl-C while a long prompt is read (~750 tokens, near the terminal's 4095-byte line limit:
# seconds of prefill on 2 threads): the evaluation stops between two layers, the message is
# dropped, nothing is answered.
long="Summarize this text in one sentence:$(printf ' The old lighthouse keeper climbed the stairs every evening to light the lamp for the ships.%.0s' $(seq 1 42))"
tm send-keys -t chat -l "$long"
tm send-keys -t chat Enter
wait_for 1 'reading the prompt +[0-9]+%'
tm send-keys -t chat C-c
wait_for 1 '\[stopped while reading the prompt'
wait_for 6 '^> '
# History: Up recalls the long prompt, Up again the /stats before it.
tm send-keys -t chat Up Up
wait_for 2 '^> /stats'
tm send-keys -t chat Enter
wait_for 2 '^\[context [0-9]+/2048 tokens'
wait_for 7 '^> '
after=$(last_stats)

# Ctrl-C during an answer stops the answer, not the program.
tm send-keys -t chat "Write a very long story about a dragon and a knight." Enter
wait_until "the story to start" story_started
tm send-keys -t chat C-c
wait_for 1 '\[answer stopped\]'
wait_for 8 '^> '
tm send-keys -t chat "/stats" Enter
wait_for 3 '^\[context [0-9]+/2048 tokens'
tm send-keys -t chat C-d  # on an empty line: quits
wait_for 1 'KAIROX_CHAT_EXITED rc=0'

out=$(screen)
echo "$out"
fail=0
check() { grep -qE -- "$1" <<<"$out" || { echo "FAIL: the screen lacks '$1'"; fail=1; }; }
history=$state/kairox/chat_history
if [[ ! -f $history || $(stat -c %a "$history") != 600 ]]; then
  echo "FAIL: no private history file at $history"; fail=1
fi

# A second session finds the first one's lines: Up shows the last (/stats), Up again the
# story's prompt, as entered.
tm new-session -d -s chat2 -x 160 -y 50 -e "XDG_STATE_HOME=$state" \
  "'$chat' -m '$model' -t 2 -c 256; echo KAIROX_CHAT_EXITED rc=\$?; sleep 60"
screen2() { tm capture-pane -p -J -S -50 -t chat2; }
for _ in $(seq 1 600); do screen2 | grep -qE '^> $' && break; sleep 0.1; done
tm send-keys -t chat2 Up
for _ in $(seq 1 100); do screen2 | grep -qE '^> /stats' && break; sleep 0.1; done
tm send-keys -t chat2 Up
for _ in $(seq 1 100); do
  screen2 | grep -qE '^> Write a very long story about a dragon and a knight\.$' && break
  sleep 0.1
done
screen2 | grep -qE '^> Write a very long story about a dragon and a knight\.$' ||
  { echo "FAIL: the second session's Up Up did not recall the story's prompt:"; screen2; fail=1; }
tm send-keys -t chat2 C-u C-d
for _ in $(seq 1 100); do screen2 | grep -q 'KAIROX_CHAT_EXITED rc=0' && break; sleep 0.1; done

# KAIROX_CHAT_HISTORY=off: nothing written.
off=$state/off
mkdir -p "$off"
tm new-session -d -s chat3 -x 160 -y 50 -e "XDG_STATE_HOME=$off" -e KAIROX_CHAT_HISTORY=off \
  "'$chat' -m '$model' -t 2 -c 256; echo KAIROX_CHAT_EXITED rc=\$?; sleep 60"
screen3() { tm capture-pane -p -J -S -50 -t chat3; }
for _ in $(seq 1 600); do screen3 | grep -qE '^> $' && break; sleep 0.1; done
tm send-keys -t chat3 "/stats" Enter
for _ in $(seq 1 100); do screen3 | grep -q '^\[context' && break; sleep 0.1; done
tm send-keys -t chat3 C-d
for _ in $(seq 1 100); do screen3 | grep -q 'KAIROX_CHAT_EXITED rc=0' && break; sleep 0.1; done
screen3 | grep -q 'KAIROX_CHAT_EXITED rc=0' || { echo "FAIL: the third session:"; screen3; fail=1; }
if [[ -e $off/kairox ]]; then echo "FAIL: KAIROX_CHAT_HISTORY=off wrote $off/kairox"; fail=1; fi
check '^kairox-chat .*\(chatml template'
check '^> What is the capital of France\?'
check 'Paris'
check '^> What is the capital of Germany\?'
check 'Berlin'
check '^> Write a very long story'
check '^\[context [0-9]+/2048 tokens, 6 messages'
# The stopped prompt left the conversation as it was and added nothing to the context (it may
# hold a little less: a turn keeps only the tokens its new rendering shares with the session).
num() { grep -oE "$1" <<<"$2" | grep -oE '^[0-9]+'; }
if [[ $(num '[0-9]+ messages' "$after") != "$(num '[0-9]+ messages' "$before")" ]] ||
   (( $(num '[0-9]+/' "$after") > $(num '[0-9]+/' "$before") )); then
  echo "FAIL: after Ctrl-C while reading the prompt: '$after', before it: '$before'"; fail=1
fi
# Once, for the Ctrl-C at the prompt; the two during turns must not print it.
if (( $(grep -c 'Ctrl-C stops an answer' <<<"$out") != 1 )); then
  echo "FAIL: a Ctrl-C during a turn was taken as one at the prompt"; fail=1
fi
if grep -q 'never sent' <<<"$(grep -v '^> this line is never sent' <<<"$out")"; then
  echo "FAIL: the line dropped with Ctrl-C reached the model"; fail=1
fi
exit $fail
