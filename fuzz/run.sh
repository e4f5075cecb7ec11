#!/usr/bin/env bash
# Runs each libFuzzer harness of build-fuzz/ for FUZZ_SECONDS (or FUZZ_RUNS
# executions), one at a time, niced, on one core; the working corpus grows in
# build-fuzz/corpus/NAME (the committed seeds in fuzz/corpus/NAME are read,
# never written); crashes go to build-fuzz/artifacts/. Prints one table row
# per harness: executions, exec/s, coverage (cov, ft), corpus size, result.
#   fuzz/run.sh BUILD_DIR [NAME...]
set -uo pipefail
build=${1:?usage: fuzz/run.sh BUILD_DIR [NAME...]}
shift
here=$(cd "$(dirname "$0")" && pwd)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(npy intervals dense samples params scenario profile trace viz_script)
seconds=${FUZZ_SECONDS:-60}
runs=${FUZZ_RUNS:--1}
mkdir -p "$build/artifacts" "$build/logs"
status=0
printf '| harness | executions | exec/s | cov | ft | corpus | time (s) | result |\n'
printf '|---|---|---|---|---|---|---|---|\n'
for n in "${names[@]}"; do
  exe="$build/fuzz/fuzz_$n"
  [ -x "$exe" ] || { echo "fuzz/run.sh: $exe not built" >&2; status=1; continue; }
  mkdir -p "$build/corpus/$n"
  log="$build/logs/$n.log"
  start=$(date +%s)
  nice -n 10 "$exe" "$build/corpus/$n" "$here/corpus/$n" -dict="$here/dict/$n.dict" \
    -max_total_time="$seconds" -runs="$runs" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$build/artifacts/$n-" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$')
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(ls "$build/corpus/$n" | wc -l)
  result=ok
  if [ $rc -ne 0 ] || grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|ALARM: working on the last Unit' "$log"; then
    result="FAILED (rc $rc, see $log)"
    status=1
  fi
  printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$n" "${execs:-?}" "${rate:-?}" "${cov:-?}" \
    "${ft:-?}" "$corp" "$secs" "$result"
done
exit $status
