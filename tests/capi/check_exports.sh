#!/usr/bin/env bash
# The shared library exports exactly the functions kairox.h declares with
# KX_API: every declared function is defined (links), nothing else leaks.
#
#   check_exports.sh build/lib/libkairox.so include/kairox/kairox.h
set -euo pipefail
lib=$1
header=$2
command -v nm >/dev/null || { echo "SKIPPED: nm not found"; exit 77; }

declared=$(grep -E '^KX_API ' "$header" | grep -oE '\bkx_[a-z0-9_]+\(' | tr -d '(' | sort -u)
exported=$(nm -D --defined-only "$lib" | awk '{print $NF}' | sort -u)

n_declared=$(wc -l <<<"$declared")
if ((n_declared < 40)); then
  echo "FAIL: parsed only $n_declared declarations from $header"
  exit 1
fi
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
extra=$(comm -13 <(echo "$declared") <(echo "$exported"))
status=0
if [[ -n $missing ]]; then
  echo "FAIL: declared in $header but not exported by $lib:"; echo "$missing"; status=1
fi
if [[ -n $extra ]]; then
  echo "FAIL: exported by $lib but not declared in $header:"; echo "$extra"; status=1
fi
((status == 0)) && echo "OK: $n_declared functions declared and exported, nothing else"
exit $status
