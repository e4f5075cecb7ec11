#!/usr/bin/env bash
# bench/sass_check.sh BUILD_DIR — the SASS of every sm90 kernel object before timing
# (HOPPER.md's check): per kernel function, its HGMMA count and its local-memory
# instructions (LDL/STL: spills). Exit 1 when an sm90 attention kernel has no HGMMA
# or any local-memory access. Needs cuobjdump (the CUDA toolkit).
set -uo pipefail
B=${1:?usage: bench/sass_check.sh BUILD_DIR}
bad=0
for o in "$B"/kernels/CMakeFiles/fm_kernels.dir/fm_sm90*.cu.o; do
  [ -f "$o" ] || continue
  cuobjdump -sass "$o" | awk -v obj="$(basename "$o")" '
    /Function :/ { k = $3; n[k] = 0; h[k] = 0; l[k] = 0 }
    /^ +\/\*[0-9a-f]+\*\// { n[k]++ }
    /HGMMA/ { h[k]++ }
    /[^A-Z](LDL|STL)[. ]/ { l[k]++ }
    END {
      for (k in n) {
        attn = k ~ /fwd_kernel|bwd_kernel/
        printf "%-22s %6d instr %4d HGMMA %3d LDL/STL  %s\n", obj, n[k], h[k], l[k], substr(k, 1, 90)
        if (attn && (h[k] == 0 || l[k] > 0)) bad = 1
      }
      exit bad
    }' || bad=1
done
[ "$bad" = 0 ] && echo "sass: every sm90 attention kernel issues HGMMA and touches no local memory" ||
  echo "sass: FAIL (an attention kernel without HGMMA, or with local memory)"
exit "$bad"
