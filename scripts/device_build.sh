#!/usr/bin/env bash
# device_build.sh — build and check fmsim's kernels on the H200 device machine
# in one call: unpack Criterion (and its run-time libraries) from the .debs
# carried in .device/debs into a private prefix, configure and build with
# CMake, run `fmsim verify`, the gpu-labelled tests and the kernel benchmark
# (fm_kernel_bench) with the SDPA peers, and leave every log under $OUT.
#
#   scripts/device_build.sh [quick|full]
#     quick: fmsim verify --quick, bench at 8K and 32K
#     full:  fmsim verify, bench at 8K, 32K and 128K
#   FM_PREBUILT=1  run the binaries carried in .device/bin (fmsim, test_gpu,
#                  fm_kernel_bench) instead of building (saves device time)
#   BENCH_ARGS / SDPA_SEQLENS override the benchmark's options / peer lengths;
#   BENCH64_ARGS those of the head-dim-64 run (set it empty to skip that run).
#
# Prepare .device/debs here (Debian/Ubuntu) once:
#   mkdir -p .device/debs && cd .device/debs && apt-get download libcriterion3 \
#     libcriterion-dev libgit2-1.5 libnanomsg5 libffi8 libhttp-parser2.9 libmbedcrypto7 \
#     libmbedtls14 libmbedx509-1 libssh2-1 libgssapi-krb5-2 libkrb5-3 libk5crypto3 \
#     libkrb5support0 libkeyutils1 libcom-err2 libssl3
set -uo pipefail
MODE=${1:-full}
OUT=${OUT:-$PWD/out-device}
mkdir -p "$OUT"
ROOT=$(pwd)
PREFIX=/tmp/fm-deps
JOBS=$(nproc)

log() { echo "== $*" | tee -a "$OUT/summary.txt"; }

# ---- Criterion from the carried .debs (private prefix: never unpacked into /)
mkdir -p "$PREFIX"
for f in "$ROOT"/.device/debs/*.deb; do dpkg -x "$f" "$PREFIX"; done
DEPLIB="$PREFIX/usr/lib/x86_64-linux-gnu:$PREFIX/lib/x86_64-linux-gnu"
CUDALIB=/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64
# Only the C programs see the carried libraries (python/torch keep their own).
RUNENV=(env "LD_LIBRARY_PATH=$DEPLIB:$CUDALIB:${LD_LIBRARY_PATH:-}")

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv 2>&1 | tee -a "$OUT/summary.txt"

use_prebuilt() {
  BIN=$ROOT/.device/bin
  RUNENV=(env "LD_LIBRARY_PATH=$DEPLIB:$CUDALIB:$BIN/lib:${LD_LIBRARY_PATH:-}")
  FMSIM=$BIN/fmsim
  BENCH=$BIN/fm_kernel_bench
  TEST_GPU=$BIN/test_gpu
}
prebuilt_ok() {
  [ -x "$ROOT/.device/bin/fmsim" ] &&
    env "LD_LIBRARY_PATH=$DEPLIB:$CUDALIB:$ROOT/.device/bin/lib" "$ROOT/.device/bin/fmsim" --version
}
if [ "${FM_PREBUILT:-0}" = 1 ] && prebuilt_ok; then
  use_prebuilt
  log "using prebuilt binaries from .device/bin"
else
  BUILD=$ROOT/build-device
  command -v nvcc >/dev/null 2>&1 || export CUDACXX=/usr/local/cuda/bin/nvcc
  log "configure + build ($JOBS jobs)"
  start=$(date +%s)
  if "${RUNENV[@]}" cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$PREFIX/usr" -DFM_VIEWER=OFF >"$OUT/build.txt" 2>&1 &&
     "${RUNENV[@]}" cmake --build "$BUILD" -j"$JOBS" >>"$OUT/build.txt" 2>&1; then
    log "built in $(( $(date +%s) - start )) s"
    grep -E "^ \* |^-- The following" "$OUT/build.txt" | tee -a "$OUT/summary.txt"
    FMSIM=$BUILD/app/fmsim
    BENCH=$BUILD/kernels/fm_kernel_bench
    TEST_GPU=""
  else
    tail -30 "$OUT/build.txt"
    log "BUILD FAILED ($(( $(date +%s) - start )) s)"
    if prebuilt_ok; then
      use_prebuilt
      log "falling back to the prebuilt binaries from .device/bin"
    else
      exit 1
    fi
  fi
fi

# ---- 1. fmsim verify
VERIFY_ARGS=""
[ "$MODE" = quick ] && VERIFY_ARGS="--quick"
start=$(date +%s)
"${RUNENV[@]}" "$FMSIM" verify $VERIFY_ARGS >"$OUT/verify.txt" 2>&1
rc=$?
grep -E "^(FAIL|OK)|^     " "$OUT/verify.txt" | head -20 | tee -a "$OUT/summary.txt"
log "fmsim verify $VERIFY_ARGS: exit $rc ($(( $(date +%s) - start )) s)"

# ---- 2. gpu-labelled tests
start=$(date +%s)
if [ -n "$TEST_GPU" ]; then
  "${RUNENV[@]}" "$TEST_GPU" --verbose >"$OUT/ctest.txt" 2>&1
else
  (cd "$BUILD" && "${RUNENV[@]}" ctest -L gpu --output-on-failure) >"$OUT/ctest.txt" 2>&1
fi
rc=$?
tail -4 "$OUT/ctest.txt" | tee -a "$OUT/summary.txt"
log "gpu tests: exit $rc ($(( $(date +%s) - start )) s)"

# ---- 3. kernel benchmark, then the SDPA peers in the same session
if [ "$MODE" = quick ]; then
  DEF_BENCH="--seqlens 8192,32768"
  DEF_SDPA="8192,32768"
else
  DEF_BENCH="--seqlens 8192,32768,131072"
  DEF_SDPA="8192,32768,131072"
fi
start=$(date +%s)
"${RUNENV[@]}" "$BENCH" ${BENCH_ARGS:-$DEF_BENCH} --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.txt" | tail -45
log "fm_kernel_bench: exit ${PIPESTATUS[0]} ($(( $(date +%s) - start )) s)"
if [ -n "${BENCH64_ARGS-x}" ]; then # head dim 64: a few families at one length
  start=$(date +%s)
  "${RUNENV[@]}" "$BENCH" --head-dim 64 ${BENCH64_ARGS:---seqlens 32768 --families causal,document,random_eviction} \
    2>&1 | tee "$OUT/bench64.txt" | tail -12
  log "fm_kernel_bench head dim 64: exit ${PIPESTATUS[0]} ($(( $(date +%s) - start )) s)"
fi
start=$(date +%s)
PYTHONUNBUFFERED=1 python3 "$ROOT/scripts/sdpa_peer.py" --seqlens "${SDPA_SEQLENS:-$DEF_SDPA}" \
  --bench-json "$OUT/bench.json" 2>&1 | tee "$OUT/sdpa.txt"
log "sdpa peers: exit ${PIPESTATUS[0]} ($(( $(date +%s) - start )) s)"
