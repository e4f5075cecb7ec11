#!/usr/bin/env bash
# dense_check_bench.sh — wall time and peak RSS of `fmsim check` on dense masks.
#
#   bench/dense_check_bench.sh [BUILD_DIR] [WORK_DIR]
#
# Generates bool .npy masks with bench/gen_dense_mask.c (a causal document
# mask: structured; a random mask: the worst case, a run boundary every other
# element) and times `fmsim check --json` with /usr/bin/time -v: the median
# wall time of REPS runs (default 3) after one warm-up read, and the largest
# peak RSS. Tables:
#   1. the Must-reach figures: 32768 x 32768 (1 GiB), structured and random,
#      warm page cache; plus one cold read of the structured file (its pages
#      dropped with posix_fadvise, nothing else touched);
#   2. time vs Sq*Sk: square masks from 4096 to 32768;
#   3. memory vs Sk: Sq = 256, Sk from 65536 to 4194304 (a 1 GiB file at the end);
#   4. several heads: [4, 8192, 8192] (per-column head hashes, head comparison).
# Files go to WORK_DIR (default $TMPDIR or /tmp) and are removed at the end
# unless KEEP=1. Needs about 2.2 GiB of disk.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build-dense}
WORK=${2:-${TMPDIR:-/tmp}/fmsim_dense_bench}
REPS=${REPS:-3}
FMSIM=$BUILD/app/fmsim
[ -x "$FMSIM" ] || { echo "dense_check_bench: no fmsim at $FMSIM (build first)" >&2; exit 2; }
mkdir -p "$WORK"
GEN=$WORK/gen_dense_mask
cc -O2 -std=c11 -o "$GEN" "$ROOT/bench/gen_dense_mask.c"

# measure FILE -> "wall_s rss_mb form max_runs" (median wall of REPS, max RSS)
measure() {
  local f=$1 walls=() rss=0 w r
  "$FMSIM" check --json "$f" >"$WORK/out.json" || [ $? -eq 1 ] # warm-up; exit 1 = does not fit
  for _ in $(seq "$REPS"); do
    /usr/bin/time -v -o "$WORK/time.txt" "$FMSIM" check --json "$f" >"$WORK/out.json" || [ $? -eq 1 ]
    w=$(awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, t, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + t[i]; print s}' "$WORK/time.txt")
    r=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$WORK/time.txt")
    walls+=("$w")
    [ "$r" -gt "$rss" ] && rss=$r
  done
  local med
  med=$(printf '%s\n' "${walls[@]}" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
  local form runs
  form=$(sed -n 's/^  "form": \(.*\),$/\1/p' "$WORK/out.json" | tr -d '"')
  runs=$(sed -n 's/^  "max_runs": \(.*\),$/\1/p' "$WORK/out.json")
  echo "$med $(awk -v k="$rss" 'BEGIN {printf "%.1f", k / 1024}') $form $runs"
}

# row KIND SQ SK [H] -> one table line
row() {
  local kind=$1 sq=$2 sk=$3 h=${4:-0} f="$WORK/$1_$2x$3_h${4:-0}.npy"
  "$GEN" "$kind" "$sq" "$sk" "$f" 1 "$h"
  local n=$((sq * sk * (h > 0 ? h : 1)))
  read -r wall rss form runs <<<"$(measure "$f")"
  printf "%-16s %6s %8s %8s %10.0f %8s %10.2f %8s  %-9s %s\n" "$kind" "$( [ "$h" -gt 0 ] && echo "$h" || echo 1)" "$sq" "$sk" \
    "$(awk -v n="$n" 'BEGIN {print n / 1048576}')" "$wall" "$(awk -v w="$wall" -v n="$n" 'BEGIN {print w * 1e9 / n}')" "$rss" "$form" "$runs"
  [ "${KEEP:-0}" = 1 ] || [ "${5:-}" = keep ] || rm -f "$f"
}

header() {
  printf "%-16s %6s %8s %8s %10s %8s %10s %8s  %-9s %s\n" kind H Sq Sk "MiB" "wall s" "ns/elem" "RSS MB" form max_runs
}

echo "fmsim check: $(nproc) cores, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo); median of $REPS runs, warm page cache"
echo
echo "1. Must reach: 32768 x 32768 bool (1 GiB); targets: structured < 1 s and < 64 MB RSS, random < 5 s"
header
row causal_document 32768 32768 0 keep
row random 32768 32768
F="$WORK/causal_document_32768x32768_h0.npy"
"$GEN" evict "$F"
/usr/bin/time -v -o "$WORK/time.txt" "$FMSIM" check --json "$F" >/dev/null
echo "causal_document, cold page cache (one run): wall $(awk -F': ' '/Elapsed/ {print $2}' "$WORK/time.txt"), RSS $(awk -F': ' '/Maximum resident/ {printf "%.1f MB", $2 / 1024}' "$WORK/time.txt")"
[ "${KEEP:-0}" = 1 ] || rm -f "$F"
echo
echo "2. time vs Sq*Sk (square masks): ns/elem should stay flat"
echo "   (/usr/bin/time -v reports wall time in 10 ms steps: the 16 MiB rows are at its resolution)"
header
for s in 4096 8192 16384 32768; do row causal_document $s $s; done
for s in 4096 8192 16384 32768; do row random $s $s; done
echo
echo "3. memory vs Sk (Sq = 256): RSS should grow linearly in Sk"
header
for k in 65536 262144 1048576 4194304; do row causal_document 256 $k; done
echo
echo "4. several heads: [4, 8192, 8192]"
header
row causal_document 8192 8192 4
row random 8192 8192 4
[ "${KEEP:-0}" = 1 ] || rm -f "$GEN" "$WORK/out.json" "$WORK/time.txt"
