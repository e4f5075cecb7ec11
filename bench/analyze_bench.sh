#!/usr/bin/env bash
# Benchmark of the interval path on the CPU: `fmsim analyze` counts at 1M tokens
# (target: under 2 s wall and 100 MB peak RSS on a 2-core machine) and the
# paper table (target: under 30 s). Prints wall seconds and peak RSS per case.
# usage: bench/analyze_bench.sh [path/to/fmsim]
set -euo pipefail
fmsim=${1:-build/app/fmsim}
measure() {
  local label=$1; shift
  local log
  log=$(mktemp)
  /usr/bin/time -f '%e %M' -o "$log" "$fmsim" "$@" >/dev/null
  read -r wall rss_kb <"$log"
  rm -f "$log"
  printf '%-58s %7.2f s %8.1f MB\n' "$label" "$wall" "$(echo "$rss_kb / 1024" | bc -l)"
}
printf '%-58s %9s %11s\n' case wall "peak RSS"
for s in 65536 262144 1048576; do
  measure "analyze causal_document S=$s Br=128 Bc=64" analyze --family causal_document --seqlen "$s" --br 128 --bc 64
done
measure "analyze random_eviction S=1048576 Br=128 Bc=64" analyze --family random_eviction --seqlen 1048576 --br 128 --bc 64
measure "analyze global_sliding_window S=1048576 Br=128 Bc=64" analyze --family global_sliding_window --seqlen 1048576 --br 128 --bc 64
measure "analyze --paper-table" analyze --paper-table
