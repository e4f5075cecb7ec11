#!/usr/bin/env bash
# bench/gpu.sh — fmsim's GPU experiments as a table, for any machine with an NVIDIA
# GPU (Hopper for the sm90 kernels), python3 with torch, and fmsim built there
# (`cmake --build build`; or the libraries named below). From the repository root:
#
#   bash bench/gpu.sh EXPERIMENT [EXPERIMENT ...]      # results under $OUT (default out/gpu)
#
# experiment   budget(s)  what it runs
EXPERIMENTS='
env          30    nvidia-smi, torch, the commit
sass         60    bench/sass_check.sh on the build (HGMMA, no local memory) where objects exist
torchtest    240   tests/test_torch_op.py: fmsim.torch against SDPA-math, gradients, training
overhead     90    bench/torch_overhead.py: the op over the bare launch (host and GPU)
probe        60    bench/burst_probe.py: idle pause vs single-launch time and clock
crosscheck   240   fm_kernel_bench --sustained against fmsim.protocol: same sustained figure within 2%
table        540   bench/protocol_bench.py $FM_TABLE_ARGS (--resume into $OUT/table.json)
'
# Environment:
#   OUT                 results folder (default out/gpu)
#   FM_BUILD            the build folder (default build): libraries, fm_kernel_bench, objects
#   FMSIM_LIBRARY, FMSIM_CUDA_LIBRARY, FM_KERNEL_BENCH   override the build's files
#   FM_TABLE_ARGS       arguments of bench/protocol_bench.py for `table` (default: the
#                       paper's table, head dim 128, both passes, every peer)
#   FM_TABLE_JSON       its JSON (default $OUT/table.json; --resume reads it back)
#   FM_BUDGET_S         overrides every experiment's budget (seconds)
# Optional provisioning for a machine without a package registry (carried wheels and
# libraries): bench/provision.sh. Each experiment is cut at its budget; the script goes
# on and exits 1 when any failed; steps.tsv records name, exit code, seconds.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
OUT=${OUT:-$ROOT/out/gpu}
BUILD=${FM_BUILD:-$ROOT/build}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
export FMSIM_LIBRARY=${FMSIM_LIBRARY:-$BUILD/core/libfmsim.so}
export FMSIM_CUDA_LIBRARY=${FMSIM_CUDA_LIBRARY:-$BUILD/kernels/libfmsim_cuda.so}
KBENCH=${FM_KERNEL_BENCH:-$BUILD/kernels/fm_kernel_bench}
export FM_COMMIT=${FM_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}
# NVLink multicast stays off in every process this script starts (a program that uses it
# can take a shared host's GPUs out of service)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
FAILED=0

budget() { [ -n "${FM_BUDGET_S:-}" ] && echo "$FM_BUDGET_S" ||
  echo "$EXPERIMENTS" | awk -v n="$1" '$1 == n { print $2 }'; }

run() { # run NAME COMMAND...: under its budget, logged to $OUT/NAME.log
  local name=$1 t s0 rc
  shift
  t=$(budget "$name")
  echo "== $name (budget ${t}s)"
  s0=$(date +%s)
  timeout --signal=TERM --kill-after=10 "$t" "$@" 2>&1 | tee "$OUT/$name.log"
  rc=${PIPESTATUS[0]}
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - s0))" >>"$OUT/steps.tsv"
  [ "$rc" -eq 0 ] || FAILED=1
}

env_info() {
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
  echo "commit $FM_COMMIT"
  ls -la "$FMSIM_LIBRARY" "$FMSIM_CUDA_LIBRARY" "$KBENCH"
}

crosscheck() { # (run through bash -c: `timeout` runs programs, not functions)
  local fams=full,causal_document lens=8192,32768
  "$KBENCH" --no-validate --no-noskip --no-instr --warmup 0 --reps 1 --pass both --families "$fams" \
    --seqlens "$lens" --sustained 1000 --json "$OUT/crosscheck_c.json" &&
    python3 bench/protocol_bench.py --peers '' --families "$fams" --seqlens "$lens" --seed 1 \
      --out "$OUT/crosscheck_py.json" &&
    python3 bench/protocol_crosscheck.py "$OUT/crosscheck_c.json" "$OUT/crosscheck_py.json"
}

[ $# -gt 0 ] || { echo "usage: bash bench/gpu.sh EXPERIMENT...; the experiments:$EXPERIMENTS" >&2; exit 2; }
for e in "$@"; do
  case $e in
    env)
      export -f env_info
      export KBENCH
      run env bash -c env_info ;;
    sass) run sass bash bench/sass_check.sh "$BUILD" ;;
    torchtest) run torchtest python3 tests/test_torch_op.py ;;
    overhead) run overhead python3 bench/torch_overhead.py --out "$OUT/overhead.json" ;;
    probe) run probe python3 bench/burst_probe.py --out "$OUT/probe.json" ;;
    crosscheck)
      export -f crosscheck
      export KBENCH OUT
      run crosscheck bash -c crosscheck ;;
    table)
      # shellcheck disable=SC2086  # FM_TABLE_ARGS is a list of arguments
      run table python3 bench/protocol_bench.py ${FM_TABLE_ARGS:-} --resume \
        --budget-s $(($(budget table) - 120)) --out "${FM_TABLE_JSON:-$OUT/table.json}" ;;
    *) echo "gpu.sh: unknown experiment '$e'; the experiments:$EXPERIMENTS" >&2; exit 2 ;;
  esac
done
exit "$FAILED"
