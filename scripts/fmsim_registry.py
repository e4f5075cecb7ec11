"""The family registry as `fmsim families --json` prints it, for the repository's
generator scripts (bench/make_heldout.py, fuzz/make_seeds.py), so that a new family
needs no edit there (docs/DESIGN.md, "Adding a family")."""
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def families(exe=None, who="fmsim_registry"):
    """The registry's families in its order (a list of dicts); exe: the fmsim binary
    ($FMSIM_BIN, the checkout's build/app/fmsim or PATH when None). One line and exit
    on failure."""
    if not exe:
        exe = os.environ.get("FMSIM_BIN") or os.path.join(ROOT, "build", "app", "fmsim")
        if not os.access(exe, os.X_OK):
            exe = shutil.which("fmsim") or exe
    try:
        out = subprocess.run([exe, "families", "--json"], check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit("%s: cannot run `%s families --json` (build fmsim, or set FMSIM_BIN): %s" % (who, exe, e))
    return json.loads(out.stdout)
