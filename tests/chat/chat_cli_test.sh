#!/usr/bin/env bash
# kairox-chat's non-interactive behaviour: --help, --version, bad flags, and
# one prompt piped on stdin answered with a tiny model.
#
#   chat_cli_test.sh path/to/kairox-chat path/to/kx_write_tiny_model SCRATCH_DIR
set -euo pipefail
chat=$1
writer=$2
dir=$3
mkdir -p "$dir"
fail=0
expect() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; fi; }

out=$("$chat" --help)
expect "--help prints the usage" '[[ $out == *"usage: kairox-chat"* && $out == *"/reset"* ]]'
expect "--help shows the library's sampler defaults" '[[ $out == *"--temp NUM [0.8]"* && $out == *"--repeat-penalty NUM [1]"* && $out == *"--top-p NUM [0.95]"* ]]'
expect "--help lists the device flags with -ngl" '[[ $out == *"--n-gpu-layers,--gpu-layers"* && $out == *"-ngl"* ]]'
out=$("$chat" --version)
expect "--version prints the version" '[[ $out =~ ^kairox-chat\ [0-9]+\.[0-9]+\.[0-9]+$ ]]'
set +e
err=$("$chat" --bogus 2>&1 >/dev/null); rc=$?
expect "an unknown flag fails" '(( rc != 0 )) && [[ $err == *"unknown argument"* ]]'
err=$(echo hi | "$chat" -m "$dir/missing.gguf" 2>&1 >/dev/null); rc=$?
expect "a missing model fails with its path" '(( rc != 0 )) && [[ $err == *"missing.gguf"* ]]'
err=$(echo hi | "$chat" -m "$dir/missing.gguf" --min-p 3 2>&1 >/dev/null); rc=$?
expect "min-p out of range fails before the model loads" '(( rc != 0 )) && [[ $err == *"min_p"*"out of range"* && $err != *"missing.gguf"* ]]'
# Integers are range-checked in 64 bits before the model loads, naming the flag.
for bad in "-t 4294967296" "-c 4294967552" "-n -5" "--n-predict -5" "-ngl x" "--threads -1"; do
  err=$(echo hi | "$chat" -m "$dir/missing.gguf" $bad 2>&1 >/dev/null); rc=$?
  expect "$bad is refused with the range" '(( rc == 1 )) && [[ $err == *"expects an integer"* && $err != *"missing.gguf"* ]]'
done
err=$(echo hi | "$chat" -m "$dir/missing.gguf" --temp nan 2>&1 >/dev/null); rc=$?
expect "--temp nan is refused before the model loads" '(( rc == 1 )) && [[ $err == *"temperature"*"out of range"* && $err != *"missing.gguf"* ]]'
err=$("$chat" --device tpu 2>&1 >/dev/null); rc=$?
expect "--device names its choices" '(( rc == 1 )) && [[ $err == *"--device: expects auto, cpu, cuda or sim"* ]]'
set -e
"$writer" "$dir/tiny.gguf"
# A fixed seed answers the same twice (the default seed is random).
a=$(echo "hello there" | "$chat" -m "$dir/tiny.gguf" -n 8 -t 2 -c 128 -s 42 --temp 1 2>/dev/null)
b=$(echo "hello there" | "$chat" -m "$dir/tiny.gguf" -n 8 -t 2 -c 128 --seed 42 --temp 1 2>/dev/null)
expect "-s 42 and --seed 42 answer the same" '[[ -n $a && $a == "$b" ]]'

out=$(echo "hello there" | "$chat" -m "$dir/tiny.gguf" -n 8 -t 2 -c 128 2>"$dir/stderr.txt")
expect "a piped prompt is answered and the program exits 0" '[[ -n $out ]]'
set +e
echo "   " | "$chat" -m "$dir/tiny.gguf" >/dev/null 2>&1; rc=$?
set -e
expect "an empty piped prompt fails" '(( rc != 0 ))'
exit $fail
