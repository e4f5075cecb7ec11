#!/usr/bin/env bash
# ctest's set-up of the Python tests: a fresh virtual environment (seeing the
# system's numpy, pytest and nbclient) with `pip install ./python` in it, as a
# user would install the package from the checkout; then `import fmsim` from
# outside the checkout must load the packaged libfmsim.
#   usage: test_python_install.sh PYTHON VENV_DIR PACKAGE_DIR   (FMSIM_LIBRARY, FMSIM_BIN set)
set -euo pipefail
PY=$1 VENV=$2 PKG=$3
rm -rf "$VENV"
"$PY" -m venv --system-site-packages "$VENV"
"$VENV/bin/python" -m pip install --quiet --no-deps --no-build-isolation --no-index "$PKG"
rm -rf "$PKG/build" "$PKG"/*.egg-info
cd /
env -u FMSIM_LIBRARY -u FMSIM_BIN "$VENV/bin/python" - <<'PY'
import os, fmsim
native = os.path.join(os.path.dirname(fmsim.__file__), "_native")
assert fmsim.LIBRARY.startswith(native), f"libfmsim loaded from {fmsim.LIBRARY}, not the package"
r = fmsim.from_mask_mod(lambda b, h, q, k: q >= k, 1, 1, 64)
assert r.fits and r.form == "causal-1", r
print("installed fmsim", fmsim.__version__, "from", native)
PY
