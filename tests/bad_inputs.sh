#!/usr/bin/env bash
# The bad-input table (tests/bad_inputs.tsv) against the fmsim binary:
#   tests/bad_inputs.sh FMSIM TABLE SCRATCH
# Builds the fixtures below in SCRATCH (a fresh folder), records every file's
# size, mode and checksum, then runs each row in SCRATCH and checks:
#   - the exit code is the row's;
#   - stderr has exactly one line (no sanitizer report, no library chatter);
#   - stdout is empty ("empty") or anything ("report": a command that prints a
#     report and refuses, e.g. convert of a mask that does not fit);
#   - no file or folder in SCRATCH was created, removed or changed.
# Row format (tab-separated): EXIT  STDOUT  ENV  ARGS
#   ENV: "-" or VAR=VALUE[,VAR=VALUE] added to the environment (DISPLAY and
#        WAYLAND_DISPLAY are always unset: the viewer must not find a display);
#   ARGS: the arguments after `fmsim`, split by the shell (quotes work; $HUGE
#        expands to a path of more than 1024 characters under SCRATCH).
# Lines starting with # and blank lines are skipped. Prints one line per
# failing row and "N passed, N failed" at the end.
set -uo pipefail
fmsim=${1:?usage: bad_inputs.sh FMSIM TABLE SCRATCH}
table=${2:?}
scratch=${3:?}
rm -rf "$scratch"
mkdir -p "$scratch"
cd "$scratch" || exit 2

# --- fixtures (made by fmsim itself, so the test needs nothing else) ------------
"$fmsim" analyze --family causal --seqlen 64 --br 16 --bc 16 --out trace >/dev/null || exit 2
"$fmsim" expand trace/columns.npy --bidir -o causal.npy >/dev/null || exit 2      # dense bool [1,1,64,64]
"$fmsim" convert causal.npy -o iv.npy >/dev/null || exit 2                        # causal-1 intervals
"$fmsim" convert causal.npy -o iv2.npy --form bidir-2 >/dev/null || exit 2        # k = 2: causal-2 or bidir-2
"$fmsim" analyze --family random_eviction --seqlen 64 --out ev >/dev/null || exit 2
"$fmsim" expand ev/columns.npy --bidir -o evict.npy >/dev/null || exit 2
printf 'not a numpy file\n' > text.npy
# issue 27: an 8 x 8 bool checkerboard, four masked runs per column: no interval form holds it
hdr8="{'descr': '|b1', 'fortran_order': False, 'shape': (8, 8), }"
{ printf '\x93NUMPY\x01\x00\x76\x00%-117s\n' "$hdr8"
  for _ in 1 2 3 4; do printf '\x01\x00\x01\x00\x01\x00\x01\x00\x00\x01\x00\x01\x00\x01\x00\x01'; done; } > board.npy
head -c 40 causal.npy > truncated.npy
printf '\x93NUMPY\x01\x00\xff\xff{' > hugeheader.npy
printf '\x93NUMPY\x01\x00\x46\x00{'"'"'descr'"'"': '"'"'|b1'"'"', '"'"'fortran_order'"'"': False, '"'"'shape'"'"': (100000, 100000), }        \n' > hugeshape.npy
printf 'Total length: 1073741824\nSample 1, num_docs 1073741824: [(0, 1)]# [0]\n' > samples76.txt
printf 'Total length: 100\nSample 1, num_docs 2: [(1, 50), (2, 30]# [0, 1]\n' > samples_bad.txt
printf 'name: x\nseqlen: [64\n' > broken.yaml
printf 'name: x\nmasks:\n  - family: nosuch\n' > unknown_family.yaml
printf 'name: x\nbogus_key: 1\nmasks:\n  - family: causal\n' > unknown_key.yaml
printf 'name: x\nseqlen: 64\nrun: [analyze, gpu]\nkernel: sm90\nmasks:\n  - family: causal\n' > sm90.yaml
printf 'name: x\nseqlen: 64\nmask_method: fast\nmasks:\n  - family: causal\n' > bad_mask_method.yaml
printf 'name: x\nseqlen: 64\nrun: [analyze, gpu]\nkernel: sm90\nprofile: nosuch\nmasks:\n  - family: causal\n' > noprofile.yaml
printf '{"format": "fmsim-gpu-profile", "version": 1, "kernel": ' > badprofile.json
printf 'key +\ndrag 0 0 99999999999 0\n' > extreme.script
printf '{"format": "fmsim-gpu-profile", broken' > broken_profile.json
printf '{"format": "something else"}\n' > other_profile.json
printf 'name: cpu\nseqlen: 256\nrun: [analyze]\nmasks:\n  - family: causal\n' > cpu.yaml
"$fmsim" run cpu.yaml --out cpu_run >/dev/null 2>&1 || exit 2                  # a run no GPU timed
# issue 20: a [1, 2^22] bool mask, sparse (4 MiB of zeros; its scan state is
# 200 MiB), and FIFOs that no process writes to (refused at once, never waited on)
printf '\x93NUMPY\x01\x00\x76\x00%s%52s\n' "{'descr': '|b1', 'fortran_order': False, 'shape': (1, 4194304), }" '' > wide.npy
truncate -s $((128 + 4194304)) wide.npy
mkfifo fifo.npy fifo.json fifo.txt fifo.yaml
printf 'hello\n' > existing.txt
ln -s existing.txt link.txt
ln -s nowhere dangling.npy
ln -s nowhere dangling.png
mkdir -p outdir emptydir outdir.png
# output folders with a planted link (refused before any work) and scenario
# files a reader must not guess at (duplicate keys, two documents, a name
# that leaves out/)
mkdir -p planted_cases planted_index planted_trace planted_lock
# a measurements file whose one case is hours of timing-model work (B = H = 65535)
printf '{"format": "fmsim-measurements", "version": 1, "gpu": "NVIDIA H200", "kernel": "sm80", "cases": [{"id": "a", "family": "causal", "params": [], "seqlen": 8192, "batch": 65535, "heads": 65535, "head_dim": 128, "seed": 0, "time_ms": 1}, {"id": "b", "family": "full", "params": [], "seqlen": 4096, "batch": 1, "heads": 4, "head_dim": 128, "seed": 0, "time_ms": 0.2}]}\n' > huge_work.json
# scenario runs whose records send calibrate outside the run folder: "../", and a link
mkdir -p escape_run link_run
rec='"causal": true, "batch": 1, "heads": 1, "head_dim": 128, "kernels": [{"kernel": "sm80", "br": 128, "bc": 64, "time_ms": 1}]'
printf '[{"id": "a", "columns": "../trace/columns.npy", %s}, {"id": "b", "columns": "../trace/columns.npy", %s}]\n' "$rec" "$rec" > escape_run/index.json
printf '[{"id": "a", "columns": "outside.npy", %s}, {"id": "b", "columns": "outside.npy", %s}]\n' "$rec" "$rec" > link_run/index.json
ln -s ../trace/columns.npy link_run/outside.npy
# a causal-1 interval file as Paddle writes it (S + 1 = 5 for "never", S = 4): read with a note
hdr="{'descr': '<i4', 'fortran_order': False, 'shape': (1, 1, 4, 1), }"
printf '\x93NUMPY\x01\x00\x76\x00%-117s\n\x05\x00\x00\x00\x05\x00\x00\x00\x05\x00\x00\x00\x05\x00\x00\x00' "$hdr" > paddle.npy
# a trace whose columns.npy (S = 64) is not the mask its summary.json (S = 128) describes
"$fmsim" analyze --family causal --seqlen 128 --out mixed >/dev/null || exit 2
cp trace/columns.npy mixed/columns.npy
ln -s ../emptydir planted_cases/cases
ln -s ../existing.txt planted_index/index.csv
ln -s ../existing.txt planted_trace/tiles.npy
ln -s ../existing.txt planted_lock/.fmsim.lock
printf 'name: x\nseqlen: 64\nseqlen: 128\nrun: [analyze]\nmasks:\n  - family: causal\n' > dup_key.yaml
printf 'name: x\nseqlen: 64\nrun: [analyze]\nmasks:\n  - family: sliding_window\n    params: {w: 8, w: 16}\n' > dup_param.yaml
printf 'name: x\nseqlen: 64\nrun: [analyze]\nmasks:\n  - family: causal\n---\nname: y\n' > two_docs.yaml
printf 'name: ../../escaped\nseqlen: 64\nrun: [analyze]\nmasks:\n  - family: causal\n' > escape_name.yaml
# -o onto a character device: as root, private nodes of /dev/null and /dev/full
# (a regressed guard would otherwise rename a file over the machine's own);
# the rows name /dev/null and /dev/full and are rewritten to these
DEVNULL=/dev/null DEVFULL=/dev/full
rm -f "$scratch/../dev-null" "$scratch/../dev-full"
if [ "$(id -u)" = 0 ] && mknod "$scratch/../dev-null" c 1 3 2>/dev/null && mknod "$scratch/../dev-full" c 1 7 2>/dev/null; then
  DEVNULL=$scratch/../dev-null DEVFULL=$scratch/../dev-full
fi
huge=$scratch
for i in 1 2 3 4 5; do huge=$huge/$(printf 'd%.0s' $(seq 1 240)); done
export HUGE=$huge/out.npy

snapshot() {
  find . -mindepth 1 -printf '%y %m %s %p %l\n' | LC_ALL=C sort
  find . -type f -print0 | LC_ALL=C sort -z | xargs -0 md5sum
}
before=$(snapshot)

pass=0
fail=0
lineno=0
while IFS= read -r line || [ -n "$line" ]; do
  lineno=$((lineno + 1))
  [[ -z "$line" || "$line" == \#* ]] && continue
  IFS=$'\t' read -r want_rc want_out envs args <<<"$line"
  envargs=(-u DISPLAY -u WAYLAND_DISPLAY)
  if [ "$envs" != "-" ]; then
    IFS=',' read -ra kv <<<"$envs"
    envargs+=("${kv[@]}")
  fi
  args=${args//\/dev\/null/$DEVNULL}
  args=${args//\/dev\/full/$DEVFULL}
  eval "argv=($args)"
  timeout 30 env "${envargs[@]}" "$fmsim" "${argv[@]}" >"$scratch/../bad.out" 2>"$scratch/../bad.err" </dev/null
  rc=$?
  why=""
  [ "$rc" = "$want_rc" ] || why="exit $rc, expected $want_rc"
  nerr=$(wc -l <"$scratch/../bad.err")
  [ -z "$why" ] && [ "$nerr" != 1 ] && why="$nerr lines on stderr, expected 1"
  [ -z "$why" ] && [ "$want_out" = empty ] && [ -s "$scratch/../bad.out" ] && why="stdout not empty"
  after=$(snapshot)
  [ -z "$why" ] && [ "$after" != "$before" ] &&
    why="the scratch folder changed: $(diff <(echo "$before") <(echo "$after") | grep '^[<>]' | head -3 | tr '\n' ' ')"
  [ -n "${BAD_INPUTS_VERBOSE:-}" ] && echo "$lineno [$rc] fmsim $args: $(cat "$scratch/../bad.err")"
  if [ -z "$why" ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $table:$lineno: fmsim $args: $why; stderr: $(head -c 400 "$scratch/../bad.err")"
    before=$after # one failure, one report
  fi
done <"$table"
rm -f "$scratch/../bad.out" "$scratch/../bad.err"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ] && [ "$pass" -ge 1 ]
