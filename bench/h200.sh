#!/usr/bin/env bash
# bench/h200.sh — everything issue 4 measures, in one run on the H200 machine:
# build, `fmsim verify`, `ctest -L gpu`, a small instrumented trace (one family
# at 8K, for notebooks/data/), `fmsim bench` (kernel table + sparsity sweep),
# the FlexAttention / SDPA peer on the masks the bench exported, and the merge
# into one table. Every result is collected under $OUT (at most 8 files come
# back from the device machine: results.tar.gz holds everything, a few small
# text files sit beside it for reading at a glance).
#
#   bash bench/h200.sh            # from the repository root, .device carried
#
# Environment:
#   OUT            where results go (default: out/h200)
#   FM_BUDGET_S    seconds the whole script may take (default 420); each step
#                  gets a share and is cut by `timeout` past it, later steps
#                  still run
#   FM_BENCH_ARGS  extra arguments for `fmsim bench` (e.g. --seqlens 8192)
#   FM_PEER_ARGS   extra arguments for bench/peer_flex.py
#   FM_PEER_SDPA   1 (default): the peer also times SDPA FA2 / cuDNN on full and causal
#   FM_VERIFY_ARGS arguments of `fmsim verify` (default --quick; set empty for the full one)
#   FM_STEPS       steps to run (default: "env build verify ctest trace bench peer merge";
#                  also: ceilings (a bf16 GEMM through PyTorch and a device-to-device
#                  copy: the two numbers of kernels/PERF_NOTES.md's floor), selftest,
#                  sanitize (compute-sanitizer memcheck, racecheck and synccheck on
#                  `fmsim verify --quick --kernel sm90`, FM_SANITIZE_ARGS), kbench (the
#                  kernels' dev harness fm_kernel_bench, head dims 128 and 64, with
#                  FM_KBENCH_ARGS / FM_KBENCH64_ARGS), fa4 (installs FlexAttention's FLASH
#                  backend from wheels: .fa4a/ staged into /tmp/stage by an earlier call,
#                  .fa4b/ carried by this one; see bench/README.md))
# The .device/ carry folder holds the .debs of Criterion, its run-time libraries and
# libyaml (apt-get download libcriterion3 libcriterion-dev libgit2-1.5 libnanomsg5
# libffi8 libhttp-parser2.9 libmbedcrypto7 libmbedtls14 libmbedx509-1 libssh2-1
# libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2
# libssl3 libyaml-0-2 libyaml-dev, in .device/debs).
# When the tree does not build there, the binaries carried in .bench-bin/ (fmsim,
# test_measure, built elsewhere for x86-64 with the same CUDA) stand in, and the
# gpu tests run directly instead of through ctest.
# Steps that fail are recorded in steps.tsv and the script goes on; it exits
# non-zero when any step failed.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
OUTDIR=${OUT:-$ROOT/out/h200}
BUDGET=${FM_BUDGET_S:-420}
STEPS=${FM_STEPS:-"env build verify ctest trace bench peer merge"}
R=/tmp/fm_h200
B=/tmp/fm_h200_build
rm -rf "$R"
mkdir -p "$R/logs" "$OUTDIR"
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
  [ -f "$R/bench/table.txt" ] && cp -f "$R/bench/table.txt" "$OUTDIR/bench_table.txt"
  [ -f "$R/logs/verify.log" ] && tail -c 60000 "$R/logs/verify.log" >"$OUTDIR/verify_tail.txt"
  # the trace for notebooks/data/ (small) as its own archive
  [ -d "$R/trace_causal_document_8k" ] &&
    tar -C "$R" -czf "$OUTDIR/trace_causal_document_8k.tar.gz" trace_causal_document_8k
  # everything else, without the exported masks (the peer read them here)
  tar -C "$R" --exclude='bench/*/cases/*/*.npy' -czf "$OUTDIR/results.tar.gz" . 2>/dev/null
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

# FlexAttention's FLASH backend (FlashAttention-4 CuTe-DSL kernels) from carried wheels
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

# Criterion and its libraries from the carried .debs, unpacked beside / (never into it)
if want build; then
  mkdir -p "$PREFIX"
  for f in .device/debs/*.deb; do [ -f "$f" ] && dpkg -x "$f" "$PREFIX"; done
  step configure 60 "${C_ENV[@]}" cmake -S "$ROOT" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$PREFIX/usr" -DFM_VIEWER=OFF
  # everything; when some other part of the tree does not build, at least this script's targets
  step build 200 "${C_ENV[@]}" cmake --build "$B" -j "$(nproc)" ||
    step build_mine 150 "${C_ENV[@]}" cmake --build "$B" -j "$(nproc)" --target fmsim test_gpu \
      test_measure test_run_cli
fi
FMSIM=$B/app/fmsim
CTEST=1
if [ ! -x "$FMSIM" ] && [ -x "$ROOT/.bench-bin/fmsim" ]; then
  echo "h200.sh: the build has no fmsim; using the prebuilt .bench-bin/ binaries (no ctest)"
  FMSIM=$ROOT/.bench-bin/fmsim
  CTEST=0
fi
if [ ! -x "$FMSIM" ]; then
  echo "h200.sh: no fmsim binary; nothing else can run" >&2
  exit 1
fi

want selftest && [ -x "$B/kernels/fm_sm90_selftest" ] && step selftest 30 "$B/kernels/fm_sm90_selftest"
# compute-sanitizer on the Hopper kernels, forward and backward: three tools
if want sanitize; then
  for tool in memcheck racecheck synccheck; do
    # shellcheck disable=SC2086
    step "sanitize_$tool" 240 "${C_ENV[@]}" compute-sanitizer --tool "$tool" --error-exitcode 3 \
      "$FMSIM" verify --quick --kernel sm90 ${FM_SANITIZE_ARGS:-}
  done
fi
# --quick: one odd length; FM_VERIFY_ARGS= (empty) runs the full verification
# shellcheck disable=SC2086
want verify && step verify 90 "${C_ENV[@]}" "$FMSIM" verify ${FM_VERIFY_ARGS---quick}
if want ctest; then
  if [ "$CTEST" = 1 ]; then
    step ctest 120 "${C_ENV[@]}" ctest --test-dir "$B" -L gpu --output-on-failure --timeout 100
  else
    for t in "$ROOT"/.bench-bin/test_* "$ROOT"/.device/bin/test_gpu; do
      [ -x "$t" ] && step "ctest_$(basename "$t")" 100 "${C_ENV[@]}" "$t" --verbose
    done
  fi
fi
# the kernel's development harness (validate, then time every family), both head dims
if want kbench && [ -x "$B/kernels/fm_kernel_bench" ]; then
  # shellcheck disable=SC2086
  step kbench 150 "${C_ENV[@]}" "$B/kernels/fm_kernel_bench" ${FM_KBENCH_ARGS:---seqlens 8192,32768}
  # shellcheck disable=SC2086
  step kbench64 90 "${C_ENV[@]}" "$B/kernels/fm_kernel_bench" --head-dim 64 \
    ${FM_KBENCH64_ARGS:---seqlens 32768 --families causal,document,random_eviction}
fi
want trace && step trace 40 "${C_ENV[@]}" "$FMSIM" run --family causal_document --seqlen 8192 --heads 4 \
  --instrument --warmup 3 --reps 10 --out "$R/trace_causal_document_8k"
# the benchmark leaves time for the peer: it starts no new case past its budget
if want bench; then
  l=$(left)
  bb=$((l * 45 / 100))
  # shellcheck disable=SC2086
  step bench $((bb + 60)) "${C_ENV[@]}" "$FMSIM" bench --out "$R/bench" --budget-s "$bb" --warmup 1 --reps 3 \
    --noskip-reps 1 --instrument-reps 2 --sweep-draws 12 --sweep-reps 2 ${FM_BENCH_ARGS:-}
fi
SDPA_FLAG=--sdpa
[ "${FM_PEER_SDPA:-1}" = 1 ] || SDPA_FLAG=
if want peer && [ -f "$R/bench/paper-kernel-table/index.json" ]; then
  l=$(left)
  pb=$((l - 40))
  # shellcheck disable=SC2086
  step peer $((pb + 30)) python3 bench/peer_flex.py --index "$R/bench/paper-kernel-table/index.json" \
    --out "$R/peer.json" ${SDPA_FLAG} --budget-s "$pb" ${FM_PEER_ARGS:-}
fi
if want merge && [ -f "$R/bench/paper-kernel-table/run.json" ]; then
  step merge 30 python3 bench/merge.py "$R/bench" "$R/peer.json"
fi
echo "== done in $(($(date +%s) - T0))s; failed steps: $FAILED"
cat "$R/steps.tsv"
exit "$FAILED"
