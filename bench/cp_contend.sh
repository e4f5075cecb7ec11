#!/usr/bin/env bash
# bench/cp_contend.sh — does the ring's compute grow because NCCL's kernels take SMs from the
# attention kernels beside them (docs/DESIGN.md, "The exchange model", contention)? Four GPUs,
# causal_document and full at 128K (H = 4, mask-aware, both passes; bench/results/data/
# cp-h200x4-128k-512k.json's cases), each ring run with a --timeline, under NCCL's default
# channel count and with NCCL pinned to 2 and to 16 CTAs (channels) a kernel; the all-gather
# (no group beside its launches) once per family as the control. If the SMs are the mechanism
# (hypothesis a), the fraction f that bench/cp_compute_check.py --calibrate finds in each
# timeline follows the CTA count (about k / 132 on an H200) while the groups take longer with
# 2; if it is HBM / L2 traffic (hypothesis b), f per byte moved stays with the bytes whatever
# the CTAs. Every process keeps NVLink multicast off.
#
#   bash bench/cp_contend.sh FMSIM [OUT]       # FMSIM: a CUDA + NCCL build's app/fmsim
#
# About 10 cp-run calls of 10-25 s each (NCCL start, 0.5 s warm-up, 30 passes): under 4 minutes,
# the build not counted. Writes OUT/<case>.json (cp-run --json), OUT/<case>-tl.json (timelines),
# OUT/<case>.err, OUT/calibrate.txt and OUT/compute.txt.
set -u
fmsim=${1:?usage: cp_contend.sh FMSIM [OUT]}
out=${2:-${OUT:-out/cp-contend}}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${gpus:-0}" -lt 4 ]; then echo "skipped: $gpus GPUs, this needs 4"; exit 77; fi
common=(--seqlen 131072 --heads 4 --ranks 4 --sharding mask-aware --pass both --iters 30 --warmup-ms 500 --json)

# one cp-run: NAME FAMILY EXCHANGE CTAS (CTAS: "" for NCCL's default, else min = max = CTAS)
one() {
  local name=$1 fam=$2 ex=$3 ctas=$4 env=()
  [ -n "$ctas" ] && env=(NCCL_MIN_NCHANNELS="$ctas" NCCL_MAX_NCHANNELS="$ctas" NCCL_MIN_CTAS="$ctas" NCCL_MAX_CTAS="$ctas")
  local tl=()
  [ "$ex" = ring ] && tl=(--timeline "$out/$name-tl.json")
  local t0=$SECONDS
  env "${env[@]}" "$fmsim" cp-run --family "$fam" --exchange "$ex" "${common[@]}" "${tl[@]}" \
    >"$out/$name.json" 2>"$out/$name.err"
  echo "$name: exit $? in $((SECONDS - t0)) s"
}

for fam in causal_document full; do
  one "$fam-allgather" "$fam" allgather ""
  one "$fam-ring" "$fam" ring ""
  one "$fam-ring-ctas2" "$fam" ring 2
  one "$fam-ring-ctas16" "$fam" ring 16
done

# the per-step estimate of f from each timeline, and every rank's compute against cp-plan
# (needs only python3; --comm-sms 0 is the model without contention, the default with it)
{
  for tl in "$out"/*-tl.json; do
    fam=$(basename "$tl" | sed 's/-ring.*//')
    echo "== $(basename "$tl")"
    python3 bench/cp_compute_check.py --fmsim "$fmsim" --calibrate "$tl" --family "$fam" \
      --seqlen 131072 --ranks 4 --heads 4 | tail -12
  done
} >"$out/calibrate.txt" 2>&1
python3 - "$out" <<'EOF' >"$out/runs.json"
import json, glob, os, sys
runs = []
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    if f.endswith("-tl.json") or f.endswith("runs.json"):
        continue
    try:
        runs.append(json.load(open(f)))
    except ValueError:
        pass
print(json.dumps({"format": "fmsim-cp-runs", "version": 1, "runs": runs}))
EOF
{
  for f in 0 default; do
    echo "== --comm-sms $f"
    a=(); [ "$f" = 0 ] && a=(--comm-sms 0)
    python3 bench/cp_compute_check.py --fmsim "$fmsim" "${a[@]}" --verbose "$out/runs.json"
  done
} >"$out/compute.txt" 2>&1
tail -n 3 "$out/compute.txt"
grep -h 'mean f' "$out/calibrate.txt"
