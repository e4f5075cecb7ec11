#!/usr/bin/env bash
# bench/provision.sh — optional: bring fmsim and the peers' wheels to a GPU machine that
# has no package registry and no compiler setup of its own (bench/gpu.sh needs neither
# where fmsim builds there and pip works). Four verbs:
#
#   bench/provision.sh pack-build BUILD DEST     # here: fmsim's libraries and fm_kernel_bench
#                                                #   (and fmsim, from a build configured with
#                                                #   -DFM_VIEWER=OFF) with the shared libraries
#                                                #   they need that a
#                                                #   CUDA image may lack (libyaml), into DEST/
#   bench/provision.sh pack-wheels SRC A B [MB]  # here: the wheels of SRC split over folders A
#                                                #   and B, each under MB (default 60) MiB, a wheel
#                                                #   too large for one cut in parts (x.whl.part-aa ...)
#   bench/provision.sh install SITE FOLDER...    # there: the wheels of the folders (parts joined)
#                                                #   installed into SITE with pip --target
#   bench/provision.sh debs PREFIX FOLDER...     # there: the .debs of the folders unpacked into
#                                                #   PREFIX (dpkg -x, beside /, never into it):
#                                                #   Criterion for ctest, libyaml for fmsim
#
# The .debs for `debs`, fetched where apt works for the GPU machine's release (Ubuntu 24.04):
#   apt-get download libcriterion3 libcriterion-dev libgit2-1.5 libnanomsg5 libffi8 \
#     libhttp-parser2.9 libmbedcrypto7 libmbedtls14 libmbedx509-1 libssh2-1 libgssapi-krb5-2 \
#     libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2 libssl3 libyaml-0-2 libyaml-dev
# then, there: FM_PREFIX=PREFIX bash bench/gpu.sh build ... (bench/gpu.sh puts PREFIX's
# libraries on LD_LIBRARY_PATH and PREFIX/usr on CMAKE_PREFIX_PATH).
#
# Then, there: export PYTHONPATH=SITE:SITE/nvidia_cutlass_dsl/dsl_packages (pip --target does
# not run the CUTLASS DSL's .pth file) and, for a packed build,
#   FM_BUILD=DEST FMSIM_LIBRARY=DEST/core/libfmsim.so FMSIM_CUDA_LIBRARY=DEST/kernels/libfmsim_cuda.so
#   LD_LIBRARY_PATH=DEST/lib:$LD_LIBRARY_PATH.
# The wheels FlexAttention's FLASH backend (FlashAttention-4's CuTe-DSL kernels) needs on
# torch 2.11, fetched where pip works for the GPU machine's Python (3.12, x86-64):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 -d SRC \
#     flash-attn-4==4.0.0b36 nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1 \
#     nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu12==4.8.1 apache-tvm-ffi \
#     torch-c-dlpack-ext quack-kernels        # about 100 MB; libs-cu12 alone is 92 MB
set -euo pipefail
verb=${1:-}
case $verb in
  pack-build)
    B=${2:?pack-build BUILD DEST}
    D=${3:?pack-build BUILD DEST}
    mkdir -p "$D/core" "$D/kernels" "$D/lib" "$D/app"
    cp "$B/core/libfmsim.so" "$D/core/"
    cp "$B/kernels/libfmsim_cuda.so" "$B/kernels/fm_kernel_bench" "$D/kernels/"
    [ -x "$B/kernels/fm_linrnn_check" ] && cp "$B/kernels/fm_linrnn_check" "$D/kernels/"
    # the fmsim binary too where it was built without the viewer (FM_VIEWER=OFF: no cairo,
    # SDL2 or X libraries to carry), for the experiments that run it (bench, crosscheck)
    if [ -x "$B/app/fmsim" ] && ! ldd "$B/app/fmsim" | grep -q libcairo; then cp "$B/app/fmsim" "$D/app/"; fi
    for f in "$B/core/libfmsim.so" "$B/kernels/libfmsim_cuda.so" "$B/app/fmsim"; do
      [ -f "$f" ] || continue
      ldd "$f" | awk '/libyaml/ { print $3 }' | xargs -r -I{} cp -L {} "$D/lib/"
    done
    du -sh "$D"
    ;;
  pack-wheels)
    S=${2:?pack-wheels SRC A B [MB]}
    A=${3:?pack-wheels SRC A B [MB]}
    Z=${4:?pack-wheels SRC A B [MB]}
    mb=${5:-60}
    mkdir -p "$A" "$Z"
    used=0
    for w in "$S"/*.whl; do
      size=$(($(stat -c %s "$w") / 1048576 + 1))
      if [ "$size" -ge "$mb" ]; then
        split -b "$(((mb - 8) * 1048576))" "$w" "$Z/$(basename "$w").part-"
        mv "$Z/$(basename "$w").part-aa" "$A/"
        used=$((used + mb - 8))
      elif [ $((used + size)) -lt "$mb" ]; then
        cp "$w" "$A/" && used=$((used + size))
      else
        cp "$w" "$Z/"
      fi
    done
    du -sh "$A" "$Z"
    ;;
  install)
    T=${2:?install SITE FOLDER...}
    shift 2
    stage=$(mktemp -d)
    for f in "$@"; do cp "$f"/* "$stage/"; done
    for p in "$stage"/*.whl.part-aa; do
      [ -e "$p" ] || continue
      w=${p%.part-aa}
      cat "$w".part-* >"$w" && rm -f "$w".part-*
    done
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$T" "$stage"/*.whl
    rm -rf "$stage"
    echo "installed into $T"
    ;;
  debs)
    P=${2:?debs PREFIX FOLDER...}
    shift 2
    [ $# -gt 0 ] || { echo "provision.sh: debs PREFIX FOLDER...: no folder given" >&2; exit 2; }
    mkdir -p "$P"
    n=0
    for d in "$@"; do
      for f in "$d"/*.deb; do
        [ -f "$f" ] || continue
        dpkg -x "$f" "$P" && n=$((n + 1))
      done
    done
    [ "$n" -gt 0 ] || { echo "provision.sh: debs: no .deb in $*" >&2; exit 2; }
    echo "unpacked $n .debs into $P"
    ;;
  *)
    echo "usage: bench/provision.sh pack-build|pack-wheels|install|debs ... (its header says how)" >&2
    exit 2
    ;;
esac
