#!/usr/bin/env bash
# Regenerates the reference images of tests/test_viz_render.c with
# `fmsim render --no-text` (no glyphs: the images do not depend on the fonts
# of the machine). Never edit the PNGs by hand; rerun this script after a
# deliberate change to the drawing and review the new images.
#
# usage: tests/ref/make_refs.sh [FMSIM]   (default: build/app/fmsim)
# Each line below must match a case of test_viz_render.c.
set -euo pipefail
fmsim=${1:-build/app/fmsim}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

r() { local name=$1; shift; "$fmsim" render "$@" --no-text -o "$here/$name.png"; echo "  $name.png"; }

r causal_document_both --family causal_document --seqlen 8192 --layer both --size 480x320
r qk_sparse_tiles --family qk_sparse --seqlen 8192 --br 64 --bc 64 --layer tiles --size 480x320
r random_eviction_mask --family random_eviction --seqlen 131072 --layer mask --size 480x320
r causal_zoom_tokens --family causal --seqlen 64 --br 8 --bc 8 --keys 0:16 --rows 0:16 --layer both --size 480x320
r sliding_window_bytes --family sliding_window --seqlen 4096 --br 64 --bc 64 --layer bytes --size 480x320

# a dense mask no interval form holds, as test_viz_render.c's misfit_attend
# writes it: S = 256, keys 0 and 1 global, a causal window of 32, dilated
# (every other row) over keys 0..127 (1 = may attend, bool [256, 256])
python3 - "$tmp/misfit.npy" 256 <<'PY'
import struct, sys
path, n = sys.argv[1], int(sys.argv[2])
header = "{'descr': '|b1', 'fortran_order': False, 'shape': (%d, %d), }" % (n, n)
header += " " * (64 - (10 + len(header) + 1) % 64) + "\n"
def attend(i, j):
    d = i - j
    return j < 2 or (0 <= d < 32 and (j >= 128 or d % 2 == 0))
with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
    f.write(bytes(1 if attend(i, j) else 0 for i in range(n) for j in range(n)))
PY
r misfit_both "$tmp/misfit.npy" --br 16 --bc 16 --layer both --size 480x320

# the cycles overlay reads a trace: fmsim analyze, plus tile_cycles.npy with
# cycles(rt, ct) = 1000 + 37*rt + 11*ct (int64 [1, 1, Tr, Tc]), as the test writes it
"$fmsim" analyze --family causal_document --seqlen 4096 --br 128 --bc 128 --out "$tmp/trace" > /dev/null
python3 - "$tmp/trace/tile_cycles.npy" 32 32 <<'PY'
import struct, sys
path, tr, tc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
header = "{'descr': '<i8', 'fortran_order': False, 'shape': (1, 1, %d, %d), }" % (tr, tc)
header += " " * (64 - (10 + len(header) + 1) % 64) + "\n"
with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
    for rt in range(tr):
        for ct in range(tc):
            f.write(struct.pack("<q", 1000 + 37 * rt + 11 * ct))
PY
r cycles_overlay "$tmp/trace" --layer cycles --size 480x320

# the linear-RNN chunk: the built-in example, and a trace of `fmsim linrnn --cpu` with
# cycles(chunk, bi, bj) = 1000 + 37*bi + 11*bj + 5*chunk on the tiles not masked (int64
# [1, nchunks, n, n]), as test_viz_render.c's linrnn_chunk_draws_the_cycles_of_a_trace writes them
r linrnn_chunk --figure linrnn_chunk --size 420x460
"$fmsim" linrnn --cpu --doc-len 40 --tokens 1024 --heads 1 --verify-tokens 64 --trace "$tmp/lr" > /dev/null
python3 - "$tmp/lr" <<'PY'
import json, struct, sys
d = sys.argv[1]
raw = open(d + "/tile_class.npy", "rb").read()
hlen = struct.unpack("<H", raw[8:10])[0]
header, cls = raw[10:10 + hlen].decode("latin1"), raw[10 + hlen:]
shape = tuple(int(x) for x in header.split("(")[1].split(")")[0].split(",") if x.strip())
_, nch, n, _ = shape
out = "{'descr': '<i8', 'fortran_order': False, 'shape': (1, %d, %d, %d), }" % (nch, n, n)
out += " " * (64 - (10 + len(out) + 1) % 64) + "\n"
with open(d + "/tile_cycles.npy", "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(out)) + out.encode("latin1"))
    for ch in range(nch):
        for bi in range(n):
            for bj in range(n):
                masked = cls[(ch * n + bi) * n + bj] == 0
                f.write(struct.pack("<q", 0 if masked else 1000 + 37 * bi + 11 * bj + 5 * ch))
s = json.load(open(d + "/summary.json"))
s["files"]["tile_cycles"] = "tile_cycles.npy"
json.dump(s, open(d + "/summary.json", "w"))
PY
r linrnn_chunk_cycles --figure linrnn_chunk "$tmp/lr" --size 420x460

r gallery --gallery --size 800x700
r memory --figure memory --size 500x350
r cp_plan --figure cp-plan --size 500x350
