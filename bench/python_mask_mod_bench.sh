#!/usr/bin/env bash
# fmsim.from_mask_mod on attention-gym-style sliding-window, document and prefix-LM
# mask_mods (tests/test_python_gym_masks.py) at S = 32768 (or $1): the verdict and
# intervals must equal `fmsim check` / `fmsim convert` on the dense mask; prints the
# time and peak RSS of the Python process (GNU time -v). Needs 1 GiB of free disk
# per mask in $TMPDIR for the dense files (removed afterwards).
#   usage: bench/python_mask_mod_bench.sh [S] [BUILD_DIR]
set -euo pipefail
S=${1:-32768}
BUILD=${2:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FMSIM="$ROOT/$BUILD/app/fmsim"
PY=${PYTHON:-python3}
export FMSIM_LIBRARY=${FMSIM_LIBRARY:-$ROOT/$BUILD/core/libfmsim.so}
export FMSIM_BIN=$FMSIM
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/fmsim-bench-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fail=0
printf '%-15s %7s %-9s %-9s %8s %8s %s\n' mask S form check seconds peakMB intervals
for name in sliding_window document prefix_lm; do
  "$PY" "$ROOT/bench/python_mask_mod_bench.py" gen "$name" "$S" "$TMP/dense.npy"
  check_form=$("$FMSIM" check "$TMP/dense.npy" --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["form"])') || true
  "$FMSIM" convert "$TMP/dense.npy" -o "$TMP/iv_cli.npy" > /dev/null
  /usr/bin/time -v "$PY" "$ROOT/bench/python_mask_mod_bench.py" eval "$name" "$S" "$TMP/iv_py.npy" \
    > "$TMP/out.json" 2> "$TMP/time.txt"
  secs=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["seconds"])' "$TMP/out.json")
  form=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["form"])' "$TMP/out.json")
  rss=$(awk -F: '/Maximum resident set size/ {printf "%.0f", $2 / 1024}' "$TMP/time.txt")
  wall=$(awk '/Elapsed \(wall clock\)/ {print $NF}' "$TMP/time.txt")
  same=$("$PY" -c 'import numpy as np,sys; print("equal" if np.array_equal(np.load(sys.argv[1]), np.load(sys.argv[2])) else "DIFFER")' "$TMP/iv_cli.npy" "$TMP/iv_py.npy")
  printf '%-15s %7s %-9s %-9s %8s %8s %s (process wall %s)\n' "$name" "$S" "$form" "$check_form" "$secs" "$rss" "$same" "$wall"
  if [ "$form" != "$check_form" ] || [ "$same" != equal ]; then fail=1; fi
  rm -f "$TMP/dense.npy" "$TMP"/iv_*.npy
done
exit $fail
