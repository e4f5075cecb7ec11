"""Executes every notebook headless, as `make test` does.

The notebooks make their own inputs (they run fmsim and the Python package);
this runner only points them at a scratch folder (FMSIM_OUT) and the built
binary (FMSIM_BIN), runs them in this Python (which has the package
installed: ctest uses the virtual environment of tests/test_python_install.sh)
with matplotlib's inline backend, as Jupyter would, and checks:
  - the committed notebooks match notebooks/make_notebooks.py and carry no outputs;
  - every notebook runs without error;
  - every cell tagged "figure" produced an image (image/png output).
usage: run_notebooks.py FMSIM_BIN OUT_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

import nbclient
import nbformat

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NB_DIR = os.path.join(ROOT, "notebooks")


def kernel_here(tmp):
    """A 'python3' kernelspec that runs this interpreter (a system-wide one would
    run another Python, without the package), first on JUPYTER_PATH."""
    d = os.path.join(tmp, "kernels", "python3")
    os.makedirs(d)
    with open(os.path.join(d, "kernel.json"), "w") as f:
        json.dump({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                   "display_name": "Python 3", "language": "python"}, f)
    os.environ["JUPYTER_PATH"] = tmp + os.pathsep + os.environ.get("JUPYTER_PATH", "")


def missing_figures(nb):
    """Ids of the cells tagged 'figure' that show no image."""
    out = []
    for cell in nb.cells:
        if "figure" not in cell.get("metadata", {}).get("tags", []):
            continue
        if not any("image/png" in o.get("data", {}) for o in cell.get("outputs", [])):
            out.append(cell.get("id", "?"))
    return out


def main():
    fmsim, out = sys.argv[1], sys.argv[2]
    r = subprocess.run([sys.executable, os.path.join(NB_DIR, "make_notebooks.py"), "--check"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(r.stderr.strip())
    os.environ["FMSIM_OUT"] = os.path.abspath(out)
    os.environ["FMSIM_BIN"] = os.path.abspath(fmsim)
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"  # as in Jupyter
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # quiet the kernel's debugger
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="fmsim-kernel-") as tmp:
        kernel_here(tmp)
        for name in sorted(os.listdir(NB_DIR)):
            if not name.endswith(".ipynb"):
                continue
            nb = nbformat.read(os.path.join(NB_DIR, name), as_version=4)
            try:
                nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                        resources={"metadata": {"path": NB_DIR}}).execute()
                figs = sum("figure" in c.get("metadata", {}).get("tags", []) for c in nb.cells)
                lost = missing_figures(nb)
                if lost:
                    raise RuntimeError(f"cells tagged figure without an image: {', '.join(lost)}")
                passed += 1
                print(f"ok   {name} ({figs} figure cell{'s' if figs != 1 else ''})")
            except Exception as e:  # report every failing notebook, then fail
                failed += 1
                print(f"FAIL {name}: {str(e).splitlines()[-1] if str(e) else type(e).__name__}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
