#!/usr/bin/env bash
# kairox-prepare and kairox-cli on a tiny writer-made model: prepare prints one line per stage on
# stderr when stderr is not a terminal; kairox-cli's statistics line says dense or sparse and
# which sidecar; --ram-budget 50% without a sidecar is refused.
#
#   prepare_cli_test.sh path/to/kairox-prepare path/to/kairox-cli path/to/kx_write_tiny_model DIR
set -euo pipefail
prepare=$1
cli=$2
writer=$3
dir=$4
mkdir -p "$dir"
fail=0
expect() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; fi; }

"$writer" "$dir/tiny.gguf"
rm -f "$dir/tiny.kairox.gguf"
"$prepare" -m "$dir/tiny.gguf" -o "$dir/tiny.kairox.gguf" -t 2 --tokens 64 >"$dir/prepare.out" 2>"$dir/prepare.err"
err=$(cat "$dir/prepare.err")
for stage in calibration "profile (1/2)" "profile (2/2)" grouping predictors bundles; do
  expect "prepare names the stage '$stage' when it starts and ends" \
    '[[ $err == *"kairox-prepare: $stage ..."* && $err == *"kairox-prepare: $stage done in "* ]]'
done
expect "no progress bar on a file" '[[ $err != *$'"'"'\r'"'"'* ]]'
expect "prepare wrote the sidecar" '[[ -s $dir/tiny.kairox.gguf && $(cat "$dir/prepare.out") == *"wrote "* ]]'

run=(-m "$dir/tiny.gguf" -p hello -n 4 -t 2 -c 64 --temp 0)
err=$("$cli" "${run[@]}" --sidecar "$dir/tiny.kairox.gguf" 2>&1 >/dev/null)
expect "the stats line says sparse and names the sidecar" \
  '[[ $err == *"; sparse (sidecar $dir/tiny.kairox.gguf, sparsity 0.15)"* ]]'
err=$("$cli" "${run[@]}" --sidecar "$dir/tiny.kairox.gguf" --ram-budget 50% 2>&1 >/dev/null)
expect "under a budget it says so" '[[ $err == *"sparsity 0.15, RAM tier)"* ]]'
err=$("$cli" "${run[@]}" --sidecar "$dir/tiny.kairox.gguf" --no-sparse 2>&1 >/dev/null)
expect "--no-sparse says dense" '[[ $err == *"; dense"* && $err != *"; sparse"* ]]'

set +e
mv "$dir/tiny.kairox.gguf" "$dir/moved.kairox.gguf"
err=$("$cli" "${run[@]}" --ram-budget 50% 2>&1 >/dev/null); rc=$?
expect "--ram-budget 50% without a sidecar is refused, saying why" \
  '(( rc == 1 )) && [[ $err == *"--ram-budget 50%"*"sidecar"* ]]'
err=$("$cli" "${run[@]}" --ram-budget 64M 2>&1 >/dev/null); rc=$?
expect "--ram-budget SIZE without a sidecar runs dense with a warning" \
  '(( rc == 0 )) && [[ $err == *"without a sidecar"* && $err == *"; dense"* ]]'
set -e
exit $fail
