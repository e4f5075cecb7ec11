#!/usr/bin/env bash
# cp_run_gpu: fmsim cp-run on 2 GPUs over NCCL, both exchanges, checked against
# the one-GPU kernel (docs/DESIGN.md, "cp-run"). Exit 77 (skipped) with fewer
# than 2 GPUs or without NCCL at run time. Usage: cp_run_gpu.sh FMSIM
set -u
fmsim=$1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${gpus:-0}" -lt 2 ]; then echo "skipped: $gpus GPUs, cp-run needs 2"; exit 77; fi
status=0
for x in allgather ring; do
  for s in contiguous zigzag mask-aware; do
    out=$("$fmsim" cp-run --family causal_document --seqlen 16384 --heads 4 --ranks 2 --chunk 1024 \
          --sharding $s --exchange $x --check --iters 2 --warmup-ms 0 2>&1)
    rc=$?
    case $out in *"cannot load libnccl"*) echo "skipped: $out"; exit 77 ;; esac
    echo "$out" | tail -7
    if [ $rc -ne 0 ]; then echo "FAILED: $s $x (exit $rc)"; status=1; fi
  done
done
exit $status
