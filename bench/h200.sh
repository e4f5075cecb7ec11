#!/usr/bin/env bash
# bench/h200.sh — everything the GPU issues measure, on the H200 machine, in steps
# that one device call (at most 600 s) or several calls on the same warm machine
# run: build, the sm90 self-test, `fmsim verify`, `ctest -L gpu`, compute-sanitizer,
# a trace, the kernels' dev harness, `fmsim bench` (the paper's kernel table, both
# passes, both kernels, and the sweep; head dim 128, and head dim 64 at 8K/32K), the
# merge of the bench's tables (the FlexAttention / cuDNN peers: bench/gpu.sh table)
# with the issues' bars, and the timing model's calibration and held-out runs. Results
# collect under $OUT (results.tar.gz holds everything; small text files beside it).
#
#   FM_STEPS="env stage build ..." bash bench/h200.sh   # from the repository root
#
# Several calls: the working folder ($R, /tmp/fm_h200) and the build ($B) live in the
# machine's /tmp, which a warm machine keeps between calls issued back to back (it
# goes back after 30 s idle); FM_FRESH=1 (or the env step) starts them afresh. The
# order used for the issues' figures (bench/results/h200-sm90/README.md says which
# call ran what):
#   call 1 (carry .fa4a .device): env stage build selftest trace verify ctest ceilings
#   call 2 (carry .fa4b .device): fa4 bench bench64
#   call 3 (carry .device):       merge merge64 (the peers: bench/gpu.sh table)
#   call 4 (carry .device):       calib heldout fit validate sanitize
#
# Environment:
#   OUT            where results go (default: out/h200)
#   FM_BUDGET_S    seconds the whole call may take (default 540); each step gets a share
#                  and is cut by `timeout` past it, later steps still run
#   FM_BENCH_ARGS  extra arguments for `fmsim bench` (head dim 128 table)
#   FM_OVER_REPS   interleaved rounds of the overhead steps (default 8)
#   FM_AB_ARGS, FM_AB_ROUNDS  the abbwd step's fm_kernel_bench arguments and rounds (default 2);
#                  it builds the tree of .ab/old.tgz (git archive of an earlier commit, carried)
#   FM_VERIFY_ARGS arguments of `fmsim verify` (default: none, the full verification)
#   FM_SANITIZE_ARGS arguments of the sanitized `fmsim verify --quick --kernel sm90`
#   FM_STEPS       steps to run, from: env stage fa4 build sass selftest trace verify ctest
#                  ceilings sanitize kbench bench bench64 overhead overhead64 overheadbwd ncubwd abbwd
#                  probe
#                  merge merge64 calib heldout fit validate. stage copies .fa4a/ (FlexAttention's FLASH backend wheels,
#                  part 1) into /tmp/stage; fa4 adds .fa4b/ and installs them into
#                  /tmp/site (they exceed one call's 64 MiB carry).
# The .device/ carry folder holds the .debs of Criterion, its run-time libraries and
# libyaml (apt-get download libcriterion3 libcriterion-dev libgit2-1.5 libnanomsg5
# libffi8 libhttp-parser2.9 libmbedcrypto7 libmbedtls14 libmbedx509-1 libssh2-1
# libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2
# libssl3 libyaml-0-2 libyaml-dev, in .device/debs).
# Steps that fail are recorded in steps.tsv and the script goes on; it exits
# non-zero when any step failed.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
OUTDIR=${OUT:-$ROOT/out/h200}
BUDGET=${FM_BUDGET_S:-540}
STEPS=${FM_STEPS:-"env build verify ctest trace bench merge"}
R=/tmp/fm_h200
B=/tmp/fm_h200_build
case " $STEPS " in *" env "*) FM_FRESH=1 ;; esac
[ "${FM_FRESH:-0}" = 1 ] && rm -rf "$R" "$B"
mkdir -p "$R/logs" "$OUTDIR"
CALL=$(($(find "$R/logs" -name 'call*.txt' | wc -l) + 1))
echo "call $CALL: $STEPS ($(date -u))" >"$R/logs/call$CALL.txt"
T0=$(date +%s)
export PYTHONUNBUFFERED=1
# Criterion and its run-time libraries come from the carried .debs, unpacked into a
# private prefix; only the C programs see them,
# python/torch keep their own libraries.
PREFIX=/tmp/fm-deps
CUDA_LIBS=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64:/usr/local/cuda/targets/x86_64-linux/lib
[ -d /usr/local/cuda-13.0/targets/x86_64-linux/lib ] &&
  CUDA_LIBS=$CUDA_LIBS:/usr/local/cuda-13.0/targets/x86_64-linux/lib
DEPLIB=$PREFIX/usr/lib/x86_64-linux-gnu:$PREFIX/lib/x86_64-linux-gnu
C_ENV=(env "LD_LIBRARY_PATH=$DEPLIB:$CUDA_LIBS:$ROOT/.bench-bin/lib:${LD_LIBRARY_PATH:-}")
command -v nvcc >/dev/null 2>&1 || export CUDACXX=/usr/local/cuda/bin/nvcc
FAILED=0

left() { echo $((BUDGET - ($(date +%s) - T0))); }
want() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# step NAME MAX_SECONDS COMMAND...: runs under timeout min(MAX, time left), logs, records
step() {
  local name=$1 cap=$2
  shift 2
  local l
  l=$(left)
  local t=$((cap < l ? cap : l))
  if [ "$t" -lt 5 ]; then
    printf '%s\tskipped\t0\tno time left\n' "$name" >>"$R/steps.tsv"
    echo "== $name: skipped (no time left)"
    FAILED=1
    return 1
  fi
  echo "== $name (limit ${t}s, $(($(date +%s) - T0))s in)"
  local s0 rc
  s0=$(date +%s)
  timeout --signal=TERM --kill-after=10 "$t" "$@" 2>&1 | tee "$R/logs/$name.log"
  rc=${PIPESTATUS[0]}
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - s0))" "$*" >>"$R/steps.tsv"
  [ "$rc" -eq 0 ] || FAILED=1
  return "$rc"
}

# shellcheck disable=SC2317  # called by the EXIT trap
collect() {
  echo "== collect ($(($(date +%s) - T0))s in)"
  cp -f "$R/steps.tsv" "$OUTDIR/steps.tsv" 2>/dev/null
  [ -f "$R/bench/merged.txt" ] && cp -f "$R/bench/merged.txt" "$OUTDIR/merged.txt"
  [ -f "$R/bench64/merged.txt" ] && cp -f "$R/bench64/merged.txt" "$OUTDIR/merged64.txt"
  [ -f "$R/logs/verify.log" ] && tail -c 60000 "$R/logs/verify.log" >"$OUTDIR/verify_tail.txt"
  # everything (all calls so far), without the masks and per-tile arrays of the runs
  # (the peer read them here; `fmsim bench --export-only` rewrites the masks byte for
  # byte) except the trace kept for notebooks/data/
  tar -C "$R" --exclude='bench*/*/cases/*/*.npy' --exclude='calib/cases/*/*.npy' \
    --exclude='heldout/cases/*/*.npy' -czf "$OUTDIR/results.tar.gz" . 2>/dev/null
  ls -la "$OUTDIR"
}
trap collect EXIT

if want env; then
  {
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
    nvcc --version | tail -2
    cmake --version | head -1
    python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
    git -C "$ROOT" rev-parse HEAD 2>/dev/null
    for d in ${CUDA_LIBS//:/ }; do ls "$d"/libcupti* "$d"/libnvperf* 2>/dev/null; done
  } >"$R/env.txt" 2>&1
  cat "$R/env.txt"
fi

# The two ceilings of the floor: a large bf16 GEMM and a device-to-device copy (PyTorch)
if want ceilings; then
  step ceilings 60 python3 - <<'PYEOF'
import torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
for _ in range(3): a @ b
e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
ms = []
for _ in range(20):
    e0.record(); a @ b; e1.record(); torch.cuda.synchronize(); ms.append(e0.elapsed_time(e1))
ms.sort(); t = ms[len(ms) // 2]
print(f"bf16 GEMM 8192^3: {t:.3f} ms median of 20, {2 * 8192**3 / t / 1e9:.1f} TFLOP/s")
x = torch.empty(4 << 30, dtype=torch.uint8, device="cuda"); y = torch.empty_like(x)
for _ in range(2): y.copy_(x)
ms = []
for _ in range(10):
    e0.record(); y.copy_(x); e1.record(); torch.cuda.synchronize(); ms.append(e0.elapsed_time(e1))
ms.sort(); t = ms[len(ms) // 2]
print(f"device copy 4 GiB: {t:.3f} ms, {2 * x.numel() / t / 1e9:.1f} GB/s read + written")
PYEOF
fi

# FlexAttention's FLASH backend (FlashAttention-4 CuTe-DSL kernels) from carried wheels:
# part 1 staged by one call, part 2 carried by the next
if want stage; then
  mkdir -p /tmp/stage
  step stage 30 cp .fa4a/. /tmp/stage/ -r
fi
if want fa4; then
  mkdir -p /tmp/stage
  for f in .fa4a/* .fa4b/*; do [ -f "$f" ] && cp "$f" /tmp/stage/; done
  if [ -f /tmp/stage/cu12part.aa ] && [ -f /tmp/stage/cu12part.ab ]; then
    cat /tmp/stage/cu12part.aa /tmp/stage/cu12part.ab \
      >/tmp/stage/nvidia_cutlass_dsl_libs_cu12-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl &&
      rm /tmp/stage/cu12part.*
  fi
  step fa4 120 python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/stage/*.whl
fi
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}

# Criterion, libyaml and their libraries from the carried .debs, unpacked beside /
# (never into it), once per machine: fmsim itself links libyaml
if [ ! -d "$PREFIX/usr" ]; then
  mkdir -p "$PREFIX"
  for f in .device/debs/*.deb; do [ -f "$f" ] && dpkg -x "$f" "$PREFIX"; done
fi
if want build; then
  step configure 60 "${C_ENV[@]}" cmake -S "$ROOT" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$PREFIX/usr" -DFM_VIEWER=OFF
  step build 300 "${C_ENV[@]}" cmake --build "$B" -j "$(nproc)"
fi
FMSIM=$B/app/fmsim
if [ ! -x "$FMSIM" ]; then
  echo "h200.sh: no fmsim binary in $B (run the build step first, on this machine)" >&2
  exit 1
fi

want sass && step sass 60 bench/sass_check.sh "$B"
want selftest && step selftest 30 "${C_ENV[@]}" "$B/kernels/fm_sm90_selftest"
# one traced case of both passes on sm90, instrumented (also the data of notebooks/data/)
want trace && step trace 60 "${C_ENV[@]}" "$FMSIM" run --family causal_document --seqlen 8192 --heads 4 \
  --kernel sm90 --pass both --instrument --warmup 3 --reps 10 --out "$R/trace_causal_document_8k"
# FM_VERIFY_ARGS=--quick: one odd length instead of three
# shellcheck disable=SC2086
want verify && step verify 240 "${C_ENV[@]}" "$FMSIM" verify ${FM_VERIFY_ARGS:-}
want ctest && step ctest 150 "${C_ENV[@]}" ctest --test-dir "$B" -L gpu --output-on-failure --timeout 140
# compute-sanitizer on the Hopper kernels, forward and backward: three tools; and
# racecheck on the self-test's ring, the kernels' mbarrier hand-off in 30 lines (every
# lane arrives: must be clean), and on ring-lane0, the form the kernels had before (lane
# 0 arrives for its warp; recorded, expected to be reported: its exit code is not checked)
if want sanitize; then
  step sanitize_ring 60 "${C_ENV[@]}" compute-sanitizer --tool racecheck --error-exitcode 3 \
    "$B/kernels/fm_sm90_selftest" ring
  step sanitize_ring_lane0 60 "${C_ENV[@]}" compute-sanitizer --tool racecheck \
    "$B/kernels/fm_sm90_selftest" ring-lane0
  for tool in memcheck racecheck synccheck; do
    # shellcheck disable=SC2086
    step "sanitize_$tool" 200 "${C_ENV[@]}" compute-sanitizer --tool "$tool" --error-exitcode 3 \
      "$FMSIM" verify --quick --kernel sm90 ${FM_SANITIZE_ARGS:-}
  done
fi
# the kernels' development harness (validate, then time every family), both head dims
if want kbench; then
  # shellcheck disable=SC2086
  step kbench 150 "${C_ENV[@]}" "$B/kernels/fm_kernel_bench" ${FM_KBENCH_ARGS:---seqlens 8192,32768}
  # shellcheck disable=SC2086
  step kbench64 90 "${C_ENV[@]}" "$B/kernels/fm_kernel_bench" --head-dim 64 \
    ${FM_KBENCH64_ARGS:---seqlens 32768 --families causal,document,random_eviction}
fi
# the paper's kernel table (both passes; both kernels) and the sweep; then the head dim 64
# table at 8K and 32K (forward: its bar), which leaves the sweep to the first
# (the instrumentation overhead: the median over 3 pairs of interleaved rounds per case)
BENCH_OPTS=(--kernel "sm90,sm80" --warmup 1 --reps 3 --noskip-reps 1 --instrument-reps 6)
if want bench; then
  # shellcheck disable=SC2086
  step bench 590 "${C_ENV[@]}" "$FMSIM" bench --out "$R/bench" "${BENCH_OPTS[@]}" --sweep-draws 12 \
    --sweep-reps 2 ${FM_BENCH_ARGS:-}
fi
want bench64 && step bench64 120 "${C_ENV[@]}" "$FMSIM" bench --out "$R/bench64" "${BENCH_OPTS[@]}" \
  --head-dims 64 --seqlens 8192,32768 --pass fwd --sweep-draws 0
# the instrumentation overhead alone (sm90 forward; no peer): FM_OVER_REPS (default 8)
# interleaved rounds, i.e. the median over half as many pairs, per case; head dim 128
# (overhead: the 36 cases) and 64 (overhead64: 8K and 32K)
OVER_OPTS=(--kernel sm90 --pass fwd --warmup 1 --reps 1 --noskip-reps 0 --instrument-reps "${FM_OVER_REPS:-8}"
  --sweep-draws 0)
want overhead && step overhead 400 "${C_ENV[@]}" "$FMSIM" bench --out "$R/overhead" "${OVER_OPTS[@]}"
want overhead64 && step overhead64 200 "${C_ENV[@]}" "$FMSIM" bench --out "$R/overhead64" "${OVER_OPTS[@]}" \
  --head-dims 64 --seqlens 8192,32768
# the same for the sm90 backward (head dim 128, the 36 cases)
want overheadbwd && step overheadbwd 400 "${C_ENV[@]}" "$FMSIM" bench --out "$R/overheadbwd" \
  "${OVER_OPTS[@]/fwd/bwd}"
# Nsight Compute on one sm90 backward launch (full mask, 8K, head dim 128, the paper's
# shape; plain kernel): throughput, pipes, warp stalls (the harness, not fmsim: fmsim's
# own CUPTI timing would contend with the profiler)
want ncubwd && step ncubwd 120 "${C_ENV[@]}" ncu -k regex:bwd_kernel -c 1 --section SpeedOfLight \
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats \
  --section SchedulerStats --section InstructionStats --section LaunchStats \
  "$B/kernels/fm_kernel_bench" --pass bwd --seqlens 8192 --families full --warmup 0 --reps 1 \
  --no-noskip --no-instr --no-validate
# A/B of two kernel versions in one call: the tree in .ab/old.tgz (git archive of the
# earlier commit, carried) built beside this one, then both harnesses run alternately
# (FM_AB_ARGS: fm_kernel_bench arguments; FM_AB_ROUNDS rounds, old first)
if want abbwd; then
  if [ -f .ab/old.tgz ]; then
    rm -rf /tmp/fm_old && mkdir -p /tmp/fm_old && tar xzf .ab/old.tgz -C /tmp/fm_old
    step ab_configure 60 "${C_ENV[@]}" cmake -S /tmp/fm_old -B /tmp/fm_old_build -G Ninja \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX/usr" -DFM_VIEWER=OFF
    step ab_build 240 "${C_ENV[@]}" cmake --build /tmp/fm_old_build -j "$(nproc)" --target fm_kernel_bench
    AB_ARGS=${FM_AB_ARGS:---pass bwd --seqlens 8192,131072 --families full,causal --no-validate --no-noskip --no-instr --reps 3 --reps-long 2}
    for r in $(seq 1 "${FM_AB_ROUNDS:-2}"); do
      # shellcheck disable=SC2086
      step "ab_old_$r" 150 "${C_ENV[@]}" /tmp/fm_old_build/kernels/fm_kernel_bench $AB_ARGS
      # shellcheck disable=SC2086
      step "ab_new_$r" 150 "${C_ENV[@]}" "$B/kernels/fm_kernel_bench" $AB_ARGS
    done
  else
    echo "== abbwd: no .ab/old.tgz (carry it)"
    FAILED=1
  fi
fi
# the timing model's worst held-out case (draw 2: qk_sparse S = 27635, head dim 128, seed
# 201, measured 15.6% above its prediction) beside its sibling (seed 200) and causal, timed
# alternately (is the gap repeatable?) and instrumented (per-tile cycles by class)
probe() { # NAME FAMILY SEED ROUND [ARGS...]
  local name=$1 fam=$2 seed=$3 round=$4
  shift 4
  step "probe_${name}_$round" 60 "${C_ENV[@]}" "$FMSIM" run --family "$fam" --seed "$seed" --seqlen 27635 \
    --batch 4 --heads 32 --head-dim 128 --kernel sm90 --warmup 1 --reps 5 --no-bytes "$@" \
    --out "$R/probe/$name-r$round"
}
if want probe; then
  mkdir -p "$R/probe"
  for round in 0 1 2; do
    inst=()
    [ "$round" = 0 ] && inst=(--instrument)
    probe qk200 qk_sparse 200 "$round" --param docs_min=21 --param docs_max=34 "${inst[@]}"
    probe qk201 qk_sparse 201 "$round" --param docs_min=21 --param docs_max=34 "${inst[@]}"
    probe causal causal 200 "$round" "${inst[@]}"
  done
fi
SDPA_FLAG=--sdpa
[ "${FM_PEER_SDPA:-1}" = 1 ] || SDPA_FLAG=
# The peers (FlexAttention, cuDNN) are timed with fmsim in one process under the one
# timing protocol by bench/protocol_bench.py (bench/gpu.sh, experiment `table`); the
# peer/peer64 steps of earlier sessions, which timed them apart, are gone.
want merge && step merge 30 python3 bench/merge.py "$R/bench"
want merge64 && step merge64 30 python3 bench/merge.py "$R/bench64"
# the timing model: its calibration set and its held-out set (scenarios/), then the fit
if want calib; then
  step calib 320 "${C_ENV[@]}" "$FMSIM" run scenarios/calibration.yaml --out "$R/calib"
fi
want heldout && step heldout 540 "${C_ENV[@]}" "$FMSIM" run scenarios/heldout.yaml --out "$R/heldout"
# the profiles fitted from the calibration run (here: the fit reads the cases' masks),
# then predicted against measured on the held-out set and the paper's table
if want fit; then
  for k in sm90 sm80; do
    step "fit_$k" 120 "${C_ENV[@]}" "$FMSIM" calibrate "$R/calib" --kernel "$k" --out "$R/h200-$k.json"
  done
fi
if want validate; then
  for k in sm90 sm80; do
    [ -f "$R/h200-$k.json" ] || continue
    for run in heldout bench/paper-kernel-table; do
      [ -f "$R/$run/index.json" ] || continue
      [ "$k" = sm80 ] && [ "$run" = heldout ] && continue # the held-out set times sm90 alone
      step "validate_${k}_${run%%/*}" 120 "${C_ENV[@]}" python3 bench/validate_model.py "$R/$run" \
        --profile "$R/h200-$k.json" --fmsim "$FMSIM" --out "$R/validation-$k-${run%%/*}.json"
    done
  done
fi
echo "== done in $(($(date +%s) - T0))s; failed steps: $FAILED"
cat "$R/steps.tsv"
exit "$FAILED"
