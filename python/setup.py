"""Builds the fmsim package with libfmsim (and the fmsim binary) inside it.

The C code is built by the project's own CMake, never by setuptools:
  1. $FMSIM_LIBRARY (and $FMSIM_BIN) name files already built, or
  2. $FMSIM_BUILD_DIR (default: the checkout's build/) holds core/libfmsim.so, or
  3. CMake configures a private build folder and builds the targets fmsim_shared
     and fmsim (needs cmake and a C compiler; cairo for render()).
The files are copied into fmsim/_native/ of the wheel, with libfmsim_cuda.so (the
kernels, for fmsim.torch) where the build made it ($FMSIM_CUDA_LIBRARY overrides).
"""
import os
import shutil
import subprocess
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _built(build_dir):
    lib = os.path.join(build_dir, "core", "libfmsim.so")
    exe = os.path.join(build_dir, "app", "fmsim")
    return (lib if os.path.isfile(lib) else None, exe if os.path.isfile(exe) else None)


def _cmake_build():
    build_dir = tempfile.mkdtemp(prefix="fmsim-pip-build-")
    subprocess.run(["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                    "-DFM_CUDA=OFF", "-DBUILD_TESTING=OFF"], check=True)
    subprocess.run(["cmake", "--build", build_dir, "--target", "fmsim_shared", "fmsim", "-j2"],
                   check=True)
    return _built(build_dir)


def native_files():
    lib, exe = os.environ.get("FMSIM_LIBRARY"), os.environ.get("FMSIM_BIN")
    if not lib:
        lib, found_exe = _built(os.environ.get("FMSIM_BUILD_DIR", os.path.join(ROOT, "build")))
        exe = exe or found_exe
    if not lib:
        if not os.path.isfile(os.path.join(ROOT, "CMakeLists.txt")):
            raise SystemExit("fmsim: no libfmsim.so to package: set FMSIM_LIBRARY or install from "
                             "the fmsim checkout (pip install ./python)")
        lib, exe = _cmake_build()
    if not lib or not os.path.isfile(lib):
        raise SystemExit(f"fmsim: libfmsim.so not found ({lib})")
    return lib, exe


class BuildWithNative(build_py):
    def run(self):
        super().run()
        lib, exe = native_files()
        dest = os.path.join(self.build_lib, "fmsim", "_native")
        os.makedirs(dest, exist_ok=True)
        shutil.copy2(lib, os.path.join(dest, "libfmsim.so"))
        if exe and os.path.isfile(exe):
            shutil.copy2(exe, os.path.join(dest, "fmsim"))
        cuda = os.environ.get("FMSIM_CUDA_LIBRARY") or os.path.join(
            os.environ.get("FMSIM_BUILD_DIR", os.path.join(ROOT, "build")), "kernels", "libfmsim_cuda.so")
        if os.path.isfile(cuda):  # fmsim.torch's kernels, where the build had nvcc
            shutil.copy2(cuda, os.path.join(dest, "libfmsim_cuda.so"))


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # a platform wheel: it carries a shared library
        return True


setup(cmdclass={"build_py": BuildWithNative}, distclass=BinaryDistribution)
