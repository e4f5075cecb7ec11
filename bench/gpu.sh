#!/usr/bin/env bash
# bench/gpu.sh — fmsim's GPU experiments as a table, for any machine with an NVIDIA
# GPU (Hopper for the sm90 kernels) and the documented dependencies (README.md: a C11
# compiler, CMake, the CUDA toolkit with CUPTI, libyaml, Criterion for ctest; python3
# with torch for the PyTorch experiments; compute-sanitizer and ncu for theirs). fmsim is
# built there by the `build` experiment (or any build named by FM_BUILD). From the
# repository root:
#
#   bash bench/gpu.sh EXPERIMENT [EXPERIMENT ...]      # results under $OUT (default out/gpu)
#
# experiment     budget(s)  what it runs
EXPERIMENTS='
env            30    nvidia-smi, nvcc, cmake, torch, the commit
build          600   cmake -S . -B $FM_BUILD (Release, $FM_CMAKE_ARGS), then cmake --build
sass           60    bench/sass_check.sh on the build (HGMMA, no local memory) where objects exist
selftest       30    fm_sm90_selftest: the Hopper wrappers (TMA swizzle, wgmma, the mbarrier ring)
trace          60    fmsim run: one instrumented causal_document 8K case, both passes (notebooks/data/)
verify         300   fmsim verify $FM_VERIFY_ARGS: every kernel against the CPU fp64 reference
ctest          150   ctest -L gpu in the build
sanitize       500   compute-sanitizer memcheck, racecheck, synccheck on fmsim verify --quick --kernel sm90 $FM_SANITIZE_ARGS; racecheck on the self-test rings
kbench         240   fm_kernel_bench $FM_KBENCH_ARGS, then --head-dim 64 $FM_KBENCH64_ARGS
bench          600   fmsim bench (the paper table, both kernels and passes, the sweep) $FM_BENCH_ARGS into $OUT/bench, then bench/merge.py
bench64        150   fmsim bench at head dim 64, 8K and 32K, forward, into $OUT/bench64, then bench/merge.py
instoverhead   400   instrumented sm90 forward against plain, $FM_OVER_REPS interleaved rounds, head dim 128
instoverhead64 200   the same at head dim 64, 8K and 32K
instoverheadbwd 400  the same for the sm90 backward, head dim 128
ncubwd         120   Nsight Compute on one sm90 backward launch (full 8K, head dim 128)
ncufwdmask     300   Nsight Compute on one sm90 forward launch at 8K of each of FM_NCU_FAMILIES per mask method, by phase (bench/ncu_phases.py)
nculinrnn      120   Nsight Compute on the linear-RNN output kernel (drawn 64, B4 T4096 H64), by phase
partialall     200   a mask whose every tile is partial beside the full mask, 8K, head dims 128 and 64, both passes, r2p slices r2p slices
partialwords   200   the same mask and runs with --mask-method r2p words r2p words (words: the forward applies precomputed R2P words, the backward r2p)
kbwords        300   fm_kernel_bench --sm90-masks 2,3 (the methods r2p, words; forward): times and per-tile cycles, 8K, head dims 128 and 64
sweepmask      240   the 32K sparsity sweep (scenarios/sparsity-sweep.yaml, sm90, both passes) per mask method, r2p slices r2p slices, then the bench/method_ab.py table
abbwd          600   fm_kernel_bench of the tree in $FM_AB_TREE (built beside) and of this build, alternately
calib          320   fmsim run scenarios/calibration.yaml into $OUT/calib (the timing model)
heldout        540   fmsim run scenarios/heldout.yaml into $OUT/heldout
fit            240   fmsim calibrate $OUT/calib per kernel (sm90, sm80) into $OUT/h200-KERNEL.json
validate       240   bench/validate_model.py: the fitted profiles on $OUT/heldout and $OUT/bench
ceilings       60    bench/ceilings.py: bf16 GEMM and device-copy ceilings (PyTorch)
torchtest      240   tests/test_torch_op.py: fmsim.torch against SDPA-math, gradients, training
overhead       90    bench/torch_overhead.py: the op over the bare launch (host and GPU)
probe          60    bench/burst_probe.py: idle pause vs single-launch time and clock
crosscheck     300   fm_kernel_bench --sustained and fmsim bench --sustained against fmsim.protocol: same sustained figure within 2%
table          540   bench/protocol_bench.py $FM_TABLE_ARGS (--resume into $OUT/table.json)
linrnncheck    300   fm_linrnn_check (every case against the fp64 recurrence), then fm_linrnn_check --bench
linrnnbench    540   bench/linrnn_bench.py $FM_LINRNN_ARGS: the linear-RNN kernel against flash-linear-attention
cpbench        540   bench/cp_bench.py $FM_CP_ARGS (--resume into $FM_CP_JSON): fmsim cp-run against cp-plan, one GPU and torch context_parallel
'
# Environment:
#   OUT                 results folder (default out/gpu)
#   FM_BUILD            the build folder (default build): fmsim, libraries, fm_kernel_bench, objects
#   FM_CMAKE_ARGS       extra arguments of the build's configure (e.g. -G Ninja,
#                       -DCMAKE_PREFIX_PATH=PREFIX/usr for libraries unpacked by bench/provision.sh)
#   FM_PREFIX           a prefix of unpacked libraries (bench/provision.sh debs): its lib folders
#                       go on LD_LIBRARY_PATH of every experiment and its usr on CMAKE_PREFIX_PATH
#   FMSIM_LIBRARY, FMSIM_CUDA_LIBRARY, FM_KERNEL_BENCH   override the build's files
#   FM_VERIFY_ARGS      arguments of `fmsim verify` (default none: the full verification; --quick)
#   FM_SANITIZE_ARGS    extra arguments of the sanitized `fmsim verify --quick --kernel sm90`
#   FM_KBENCH_ARGS      fm_kernel_bench arguments (default --seqlens 8192,32768)
#   FM_KBENCH64_ARGS    its head dim 64 arguments (default --seqlens 32768 --families
#                       causal,document,random_eviction)
#   FM_BENCH_ARGS       extra arguments of `fmsim bench` for `bench` (e.g. --kernel sm90 --pass bwd)
#   FM_OVER_REPS        interleaved rounds of the inst* experiments (default 8; the overhead is
#                       the median over half as many pairs)
#   FM_AB_TREE          for abbwd: a source tree of the earlier version (git archive COMMIT | tar x)
#   FM_AB_ARGS          abbwd's fm_kernel_bench arguments (default: bwd, full and causal, 8K, 128K)
#   FM_AB_ROUNDS        abbwd's rounds, earlier tree first (default 2)
#   FM_TABLE_ARGS       arguments of bench/protocol_bench.py for `table` (default: the
#                       paper's table, head dim 128, both passes, every peer)
#   FM_LINRNN_ARGS      arguments of bench/linrnn_bench.py for `linrnnbench` (default --chunks 128)
#   FM_NCU_FAMILIES     ncufwdmask's masks (default: random_eviction document full; full once)
#   FM_TABLE_JSON       its JSON (default $OUT/table.json; --resume reads it back)
#   FM_CP_ARGS          arguments of bench/cp_bench.py for `cpbench` (default: every family at
#                       128K, 512K and 1M tokens, H = 4, P = 1, 2, 4 as far as GPUs are visible)
#   FM_CP_JSON          its JSON (default $OUT/cp.json; --resume reads it back)
#   FM_BUDGET_S         overrides every experiment's budget (seconds)
# Optional provisioning for a machine without a package registry (carried wheels, .debs of
# Criterion and libyaml, a packed build): bench/provision.sh. Each experiment is cut at its
# budget; the script goes on and exits 1 when any failed; steps.tsv records name, exit code,
# seconds. The curated tables in bench/results/ name the experiments that made them.
# shellcheck disable=SC2317  # the experiments' functions run through fn (bash -c)
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
LRCHECK=$BUILD/kernels/fm_linrnn_check
FMSIM=$BUILD/app/fmsim
export FM_COMMIT=${FM_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}
# NVLink multicast stays off in every process this script starts (a program that uses it
# can take a shared host's GPUs out of service)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ -n "${FM_PREFIX:-}" ]; then
  [ -d "$FM_PREFIX/usr" ] || { echo "gpu.sh: FM_PREFIX=$FM_PREFIX has no usr/ (bench/provision.sh debs)" >&2; exit 2; }
  export LD_LIBRARY_PATH="$FM_PREFIX/usr/lib/x86_64-linux-gnu:$FM_PREFIX/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export CMAKE_PREFIX_PATH="$FM_PREFIX/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
fi
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

need() { # need NAME FILE [WHAT MAKES IT]: 0 when FILE exists, else one line, the experiment failed
  [ -e "$2" ] && return 0
  echo "gpu.sh: $1: no $2 (${3:-run the build experiment first, or set FM_BUILD})" >&2
  printf '%s\t%s\t%s\n' "$1" 2 0 >>"$OUT/steps.tsv"
  FAILED=1
  return 1
}

env_info() {
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv
  nvcc --version | tail -2
  cmake --version | head -1
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
  echo "commit $FM_COMMIT"
  ls -la "$FMSIM_LIBRARY" "$FMSIM_CUDA_LIBRARY" "$KBENCH"
}

build() {
  # shellcheck disable=SC2086  # FM_CMAKE_ARGS is a list of arguments
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DFM_VIEWER=OFF ${FM_CMAKE_ARGS:-} &&
    cmake --build "$BUILD" -j "$(nproc)"
}

sanitize() { # the Hopper kernels, both passes, three tools; the self-test's ring (every lane
  # arrives: must be clean) and ring-lane0 (the kernels' earlier form: reported, not checked)
  local rc=0 tool
  compute-sanitizer --tool racecheck --error-exitcode 3 "$BUILD/kernels/fm_sm90_selftest" ring || rc=1
  compute-sanitizer --tool racecheck "$BUILD/kernels/fm_sm90_selftest" ring-lane0
  for tool in memcheck racecheck synccheck; do
    echo "-- $tool"
    # shellcheck disable=SC2086
    compute-sanitizer --tool "$tool" --error-exitcode 3 "$FMSIM" verify --quick --kernel sm90 \
      ${FM_SANITIZE_ARGS:-} || rc=1
  done
  return "$rc"
}

kbench() {
  # shellcheck disable=SC2086
  "$KBENCH" ${FM_KBENCH_ARGS:---seqlens 8192,32768} &&
    "$KBENCH" --head-dim 64 ${FM_KBENCH64_ARGS:---seqlens 32768 --families causal,document,random_eviction}
}

BENCH_OPTS="--kernel sm90,sm80 --warmup 1 --reps 3 --noskip-reps 1 --instrument-reps 6"
bench() { # the paper's kernel table (both passes, both kernels) and the sweep, then the merge
  # shellcheck disable=SC2086
  "$FMSIM" bench --out "$OUT/bench" $BENCH_OPTS --sweep-draws 12 --sweep-reps 2 ${FM_BENCH_ARGS:-} &&
    python3 bench/merge.py "$OUT/bench"
}
bench64() { # head dim 64 at 8K and 32K, forward (its bar), no sweep
  # shellcheck disable=SC2086
  "$FMSIM" bench --out "$OUT/bench64" $BENCH_OPTS --head-dims 64 --seqlens 8192,32768 --pass fwd \
    --sweep-draws 0 && python3 bench/merge.py "$OUT/bench64"
}

instoverhead() { # PASS OUTNAME [ARGS...]: the instrumented sm90 kernel against the plain one
  local pass=$1 name=$2
  shift 2
  "$FMSIM" bench --out "$OUT/$name" --kernel sm90 --pass "$pass" --warmup 1 --reps 1 --noskip-reps 0 \
    --instrument-reps "${FM_OVER_REPS:-8}" --sweep-draws 0 "$@"
}

ncuphases() { # REPORT SASS_LIBRARY FUNCTION SOURCE NAME: the report's source page as CSV and its
  # table by function of SOURCE (bench/ncu_phases.py, over nvdisasm -g of the library's cubin)
  local rep=$1 lib=$2 func=$3 src=$4 name=$5 d cub
  d=$(mktemp -d) && (cd "$d" && cuobjdump -xelf all "$lib" > /dev/null) || return 1
  cub=$(grep -l "$func" "$d"/*.cubin | head -1)
  [ -n "$cub" ] || { echo "gpu.sh: no cubin of $lib holds $func" >&2; rm -rf "$d"; return 1; }
  nvdisasm -g -c "$cub" > "$OUT/$name.sass" &&
    ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$OUT/$name-sass.csv" &&
    ncu -i "$rep.ncu-rep" --page raw --csv > "$OUT/$name-raw.csv" &&
    python3 bench/ncu_phases.py "$OUT/$name.sass" "$func" "$OUT/$name-sass.csv" --file "$(basename "$src")" \
      --functions "$src" --json "$OUT/$name-phases.json" > "$OUT/$name-phases.txt"
  local rc=$? # (no pipe: fn's bash -c has no pipefail)
  cat "$OUT/$name-phases.txt"
  rm -rf "$d" "$OUT/$name.sass"
  return $rc
}
export -f ncuphases # the experiments below call it from fn's bash -c

ncufwdmask() { # Nsight Compute on the first plain forward launch at 8K (the paper's shape, head dim
  # 128) of each family in FM_NCU_FAMILIES, once per partial-tile mask method (the full mask once:
  # it has no partial tile), --set full with the source counters into $OUT/ncufwd-FAMILY-METHOD,
  # then its table by phase (issue 25: where a partial tile's cycles go)
  local f m rc=0 func
  for f in ${FM_NCU_FAMILIES:-random_eviction document full}; do
    for m in r2p slices; do
      [ "$f" = full ] && [ "$m" = slices ] && continue
      ncu --clock-control none --set full --import-source yes -k regex:fwd_kernel -c 1 -f \
        -o "$OUT/ncufwd-$f-$m" "$FMSIM" run --family "$f" --seqlen 8192 --batch 16 --heads 32 --kernel sm90 \
        --mask-method "$m" --warmup 0 --reps 1 --no-cupti --no-bytes --out "$OUT/ncufwd-$f-$m-trace" || { rc=1; continue; }
      # the plain skip kernel at head dim 128 (fwd_kernel<128, SKIP, !INSTR, OVERLAP, PINGPONG, MASK>,
      # MASK 2 = R2P, 1 = slices); another instantiation makes ncu_phases say it finds no such function
      func="_ZN4fm9010fwd_kernelILi128ELi0ELb0ELb1ELb1ELi$([ "$m" = r2p ] && echo 2 || echo 1)EEEvNS_6paramsE"
      ncuphases "$OUT/ncufwd-$f-$m" "$FMSIM_CUDA_LIBRARY" "$func" kernels/fm_sm90_fwd.cuh "ncufwd-$f-$m" || rc=1
    done
  done
  return $rc
}

nculinrnn() { # Nsight Compute on the linear-RNN two-pass path's output kernel (its first plain
  # SKIP launch) at drawn 64 (dv 256) and B4 T4096 H64 (dv 128), fm_linrnn_check --bench's shapes,
  # by phase: a phase per function of fm_linrnn_wg.cuh (issue 23)
  local pt n rc=0
  for pt in d64:64 p4:4096:64:128; do
    n=nculinrnn-${pt//:/_}
    ncu --clock-control none --set full --import-source yes -k regex:out_kernel -c 1 -f -o "$OUT/$n" \
      "$LRCHECK" --skip-only --bench "128:$pt" > "$OUT/$n.log" 2>&1 || { rc=1; continue; }
    ncuphases "$OUT/$n" "$LRCHECK" _ZN4fmlr2wg10out_kernelILb0EEEvNS_6paramsE kernels/fm_linrnn_wg.cuh "$n-out" || rc=1
  done
  return $rc
}

partial() { # NAME A B: issue 25's per-tile bar at full length: bench/partial_everywhere.py's mask
  # (every tile partial, none skipped: the full mask's tiles, items and order, each with its mask
  # applied) beside the full mask of the same shape in one scenario run, head dims 128 and 64,
  # both passes, with --mask-method A B A B (each method's runs bracket the other's), then the
  # ratios into $OUT/NAME.json
  local name=$1 m i=0 runs=()
  python3 bench/partial_everywhere.py --seqlen 8192 --out "$OUT/partial-everywhere.npy" \
    --scenario "$OUT/partial-everywhere.yaml" --check "$FMSIM" || return 1
  for m in "$2" "$3" "$2" "$3"; do
    i=$((i + 1))
    "$FMSIM" run "$OUT/partial-everywhere.yaml" --mask-method "$m" --out "$OUT/$name$i-$m" || return 1
    runs+=("$m=$OUT/$name$i-$m")
  done
  python3 bench/partial_everywhere.py --summary "${runs[@]}" --json "$OUT/$name.json"
}

kbwords() { # fm_kernel_bench's A/B of the mask methods r2p (2) and words (3), forward, 8K:
  # interleaved times and the instrumented launch's cycles per PARTIAL and UNMASKED tile (two
  # rounds, alternating order); random_eviction's per-head words exceed the budget: its words
  # column is r2p (one stderr line)
  "$KBENCH" --seqlens 8192 --sm90-masks 2,3 --no-noskip --json "$OUT/kbwords128.json" &&
    "$KBENCH" --head-dim 64 --seqlens 8192 --sm90-masks 2,3 --no-noskip --json "$OUT/kbwords64.json"
}

sweepmask() { # the sparsity sweep per mask method, both passes: four scenario runs in the order
  # r2p slices r2p slices (each label's runs bracket the other's: the A/A spread shows the clock's
  # drift), then bench/method_ab.py's table; each index.json is also bench/validate_model.py's RUN
  local m i=0 runs=()
  for m in r2p slices r2p slices; do
    i=$((i + 1))
    "$FMSIM" run scenarios/sparsity-sweep.yaml --kernel sm90 --pass both --mask-method "$m" \
      --out "$OUT/sweep$i-$m" || return 1
    runs+=("$m=$OUT/sweep$i-$m")
  done
  python3 bench/method_ab.py "${runs[@]}" --json "$OUT/sweep-ab.json"
}

ncubwd() { # Nsight Compute on one plain backward launch (the harness: fmsim's own CUPTI
  # timing would contend with the profiler). --clock-control none: the clocks are left as the
  # GPU sets them (the device rules; ncu's default locks them at base, 1.36 GHz on the H200);
  # the full set with the source counters (stall reasons per SASS line) into $OUT/ncubwd.ncu-rep,
  # its details page printed.
  ncu --clock-control none --set full --import-source yes -k regex:bwd_kernel -c 1 -f -o "$OUT/ncubwd" \
    "$KBENCH" --pass bwd --seqlens 8192 --families full --warmup 0 --reps 1 --no-noskip --no-instr --no-validate &&
    ncu --import "$OUT/ncubwd.ncu-rep" --page details
}

abbwd() { # two kernel versions in one call: FM_AB_TREE built beside this build, alternately
  local old=$OUT/ab_build r args
  args=${FM_AB_ARGS:---pass bwd --seqlens 8192,131072 --families full,causal --no-validate --no-noskip --no-instr --reps 3 --reps-long 2}
  # shellcheck disable=SC2086
  cmake -S "$FM_AB_TREE" -B "$old" -DCMAKE_BUILD_TYPE=Release -DFM_VIEWER=OFF ${FM_CMAKE_ARGS:-} &&
    cmake --build "$old" -j "$(nproc)" --target fm_kernel_bench || return 1
  for r in $(seq 1 "${FM_AB_ROUNDS:-2}"); do
    echo "-- round $r: earlier ($FM_AB_TREE)"
    # shellcheck disable=SC2086
    "$old/kernels/fm_kernel_bench" $args || return 1
    echo "-- round $r: this build"
    # shellcheck disable=SC2086
    "$KBENCH" $args || return 1
  done
}

fit() {
  local k
  for k in sm90 sm80; do
    "$FMSIM" calibrate "$OUT/calib" --kernel "$k" --out "$OUT/h200-$k.json" || return 1
  done
}

validate() { # each fitted profile on the held-out run (sm90 alone: the set times sm90) and on
  # the paper's kernel table of `bench`, where they exist
  local k run ran=0
  for k in sm90 sm80; do
    [ -f "$OUT/h200-$k.json" ] || continue
    for run in heldout bench/paper-kernel-table; do
      [ -f "$OUT/$run/index.json" ] || continue
      [ "$k" = sm80 ] && [ "$run" = heldout ] && continue
      python3 bench/validate_model.py "$OUT/$run" --profile "$OUT/h200-$k.json" --fmsim "$FMSIM" \
        --out "$OUT/validation-$k-${run%%/*}.json" || return 1
      ran=1
    done
  done
  [ "$ran" = 1 ] || { echo "gpu.sh: validate: no fitted profile and run (fit, then heldout or bench)" >&2; return 1; }
}

crosscheck() { # (run through bash -c: `timeout` runs programs, not functions)
  local fams=full,causal_document lens=8192,32768 rc=0
  "$KBENCH" --no-validate --no-noskip --no-instr --warmup 0 --reps 1 --pass both --families "$fams" \
    --seqlens "$lens" --sustained 1000 --json "$OUT/crosscheck_c.json" || return 1
  python3 bench/protocol_bench.py --peers '' --families "$fams" --seqlens "$lens" --seed 1 \
    --out "$OUT/crosscheck_py.json" || return 1
  "$FMSIM" bench --kernel sm90 --pass both --families "$fams" --seqlens "$lens" --sustained 1000 \
    --noskip-reps 0 --instrument-reps 0 --no-bytes --sweep-draws 0 --out "$OUT/crosscheck_bench" || return 1
  echo "fm_kernel_bench --sustained against the protocol:"
  python3 bench/protocol_crosscheck.py "$OUT/crosscheck_c.json" "$OUT/crosscheck_py.json" || rc=1
  echo "fmsim bench --sustained against the protocol:"
  python3 bench/protocol_crosscheck.py "$OUT/crosscheck_bench/paper-kernel-table/index.json" \
    "$OUT/crosscheck_py.json" || rc=1
  return $rc
}

fn() { # fn NAME FUNCTION [ARGS...]: a function of this script under run's budget
  local name=$1 f=$2
  shift 2
  # shellcheck disable=SC2163  # exports the function named by $f
  export -f "$f"
  run "$name" bash -c "$f \"\$@\"" "$f" "$@"
}

export ROOT OUT BUILD KBENCH FMSIM LRCHECK BENCH_OPTS
NAMES=$(echo "$EXPERIMENTS" | awk 'NF { printf "%s%s", s, $1; s = " " }')
[ $# -gt 0 ] || { echo "usage: bash bench/gpu.sh EXPERIMENT... (bench/gpu.sh's header says what each runs): $NAMES" >&2; exit 2; }
for e in "$@"; do # every name is checked before any experiment runs
  case " $NAMES " in *" $e "*) ;; *) echo "gpu.sh: unknown experiment '$e' (the experiments: $NAMES)" >&2; exit 2 ;; esac
done
for e in "$@"; do
  [ "$e" != abbwd ] || [ -f "${FM_AB_TREE:-}/CMakeLists.txt" ] ||
    { echo "gpu.sh: abbwd needs FM_AB_TREE, a source tree of the earlier version (git archive COMMIT | tar x -C DIR)" >&2; exit 2; }
done
for e in "$@"; do
  # shellcheck disable=SC2086  # FM_VERIFY_ARGS, FM_TABLE_ARGS, FM_CP_ARGS: lists of arguments
  case $e in
    env) fn env env_info ;;
    build) fn build build ;;
    sass) run sass bash bench/sass_check.sh "$BUILD" ;;
    selftest) need selftest "$BUILD/kernels/fm_sm90_selftest" && run selftest "$BUILD/kernels/fm_sm90_selftest" ;;
    trace) need trace "$FMSIM" && run trace "$FMSIM" run --family causal_document --seqlen 8192 --heads 4 \
      --kernel sm90 --pass both --instrument --warmup 3 --reps 10 --out "$OUT/trace_causal_document_8k" ;;
    verify) need verify "$FMSIM" && run verify "$FMSIM" verify ${FM_VERIFY_ARGS:-} ;;
    ctest) need ctest "$BUILD/CTestTestfile.cmake" &&
      run ctest ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout 140 ;;
    sanitize) need sanitize "$FMSIM" && fn sanitize sanitize ;;
    kbench) need kbench "$KBENCH" && fn kbench kbench ;;
    bench) need bench "$FMSIM" && fn bench bench ;;
    bench64) need bench64 "$FMSIM" && fn bench64 bench64 ;;
    instoverhead) need "$e" "$FMSIM" && fn "$e" instoverhead fwd instoverhead ;;
    instoverhead64) need "$e" "$FMSIM" && fn "$e" instoverhead fwd instoverhead64 --head-dims 64 --seqlens 8192,32768 ;;
    instoverheadbwd) need "$e" "$FMSIM" && fn "$e" instoverhead bwd instoverheadbwd ;;
    ncubwd) need ncubwd "$KBENCH" && fn ncubwd ncubwd ;;
    ncufwdmask) need ncufwdmask "$FMSIM" && fn ncufwdmask ncufwdmask ;;
    nculinrnn) need nculinrnn "$LRCHECK" && fn nculinrnn nculinrnn ;;
    partialall) need partialall "$FMSIM" && fn partialall partial partialall r2p slices ;;
    partialwords) need partialwords "$FMSIM" && fn partialwords partial partialwords r2p words ;;
    kbwords) need kbwords "$KBENCH" && fn kbwords kbwords ;;
    sweepmask) need sweepmask "$FMSIM" && fn sweepmask sweepmask ;;
    abbwd) need abbwd "$KBENCH" && fn abbwd abbwd ;;
    calib) need calib "$FMSIM" && run calib "$FMSIM" run scenarios/calibration.yaml --out "$OUT/calib" ;;
    heldout) need heldout "$FMSIM" && run heldout "$FMSIM" run scenarios/heldout.yaml --out "$OUT/heldout" ;;
    fit) need fit "$OUT/calib/index.json" "run the calib experiment first, same OUT" && fn fit fit ;;
    validate) need validate "$FMSIM" && fn validate validate ;;
    ceilings) run ceilings python3 bench/ceilings.py --json "$OUT/ceilings.json" ;;
    torchtest) run torchtest python3 tests/test_torch_op.py ;;
    overhead) run overhead python3 bench/torch_overhead.py --out "$OUT/overhead.json" ;;
    probe) run probe python3 bench/burst_probe.py --out "$OUT/probe.json" ;;
    crosscheck) fn crosscheck crosscheck ;;
    linrnncheck) need linrnncheck "$LRCHECK" && run linrnncheck bash -c '"$0" && "$0" --bench' "$LRCHECK" ;;
    linrnnbench)
      run linrnnbench python3 bench/linrnn_bench.py ${FM_LINRNN_ARGS:---chunks 128} \
        --budget-s $(($(budget linrnnbench) - 120)) --out "$OUT/linrnn.json" ;;
    table)
      run table python3 bench/protocol_bench.py ${FM_TABLE_ARGS:-} --resume \
        --budget-s $(($(budget table) - 120)) --out "${FM_TABLE_JSON:-$OUT/table.json}" ;;
    cpbench) # the multicast variables above reach every process it starts (torchrun's too)
      need cpbench "$FMSIM" && run cpbench python3 bench/cp_bench.py --fmsim "$FMSIM" ${FM_CP_ARGS:-} --resume \
        --budget-s $(($(budget cpbench) - 60)) --out "${FM_CP_JSON:-$OUT/cp.json}" ;;
  esac
done
exit "$FAILED"
