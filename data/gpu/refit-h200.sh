#!/bin/sh
# Refits data/gpu/h200-sm90.json (forward and backward) and h200-sm80.json from one
# H200 run of the timing model's calibration set, then validates them once on the
# held-out set and the paper's kernel table of the same run, writing the error
# tables in data/gpu/validation/ (bench/results/timing-model.md is their curated table).
# Run from the repository root after building
# (FMSIM defaults to build/app/fmsim):
#   data/gpu/refit-h200.sh DIR
# DIR is the results folder of `bash bench/gpu.sh calib heldout bench` on the GPU
# (bench/gpu.sh's OUT): calib/ (scenarios/calibration.yaml), heldout/
# (scenarios/heldout.yaml) and bench/paper-kernel-table/, each a scenario run with its
# index.json and cases. The fit sees calib/ alone; heldout/ and the paper's cases only
# check it.
set -eu
DIR=${1:?usage: data/gpu/refit-h200.sh DIR (the OUT of bench/gpu.sh: calib/, heldout/, bench/paper-kernel-table/)}
FMSIM=${FMSIM:-build/app/fmsim}
PY=${PY:-python3}
SOURCE=${SOURCE:-"scenarios/calibration.yaml on NVIDIA H200, bench/gpu.sh calib"}
for k in sm90 sm80; do
  "$FMSIM" calibrate "$DIR/calib" --kernel "$k" --source "$SOURCE" --out "data/gpu/h200-$k.json"
done
mkdir -p data/gpu/validation
validate() { # PROFILE RUN TABLE
  $PY bench/validate_model.py "$DIR/$2" --profile "data/gpu/$1.json" --fmsim "$FMSIM" \
    --out "data/gpu/validation/$3.json"
}
validate h200-sm90 heldout h200-sm90-heldout
validate h200-sm90 bench/paper-kernel-table h200-sm90-paper
validate h200-sm80 bench/paper-kernel-table h200-sm80-paper
