"""Build hook: put libxent.so and the shipped tune caches inside the package.

`pip install ./python` runs `make -C <repo root> build/libxent.so` (needs gcc, make, the
CUDA toolkit's NVRTC and SQLite headers) unless XENT_PREBUILT names an already built
libxent.so, which is then copied as is (for machines that cannot build, e.g.
XENT_PREBUILT=build/libxent.so pip install --no-build-isolation ./python). The tune
caches (tunecache/*.sql) are copied from the checkout into xent/data/. Where this
interpreter imports torch (pip install --no-build-isolation), the C++ operator of
the eager fused loss, libxent_torch.so, is built against that torch and bundled too.
"""

import glob
import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))


def _repo_root():
    if os.path.isfile(os.path.join(ROOT, "include", "xent.h")) and os.path.isfile(os.path.join(ROOT, "Makefile")):
        return ROOT
    return None


def _torch_operator(root, lib, prebuilt):
    """libxent_torch.so, the C++ operator of the eager fused loss, for the torch this interpreter imports
    (`make build/libxent_torch.so PYTHON=...`); beside a prebuilt libxent.so, that one. None where it
    cannot be had (no torch here, as under pip's build isolation; no C++ compiler): the package then
    serves the same calls from Python, with more host time a step."""
    if prebuilt:
        op = os.path.join(os.path.dirname(lib), "libxent_torch.so")
        return op if os.path.isfile(op) else None
    if subprocess.call([sys.executable, "-c", "import torch"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL) != 0:
        print("xent: no torch in %s, so no C++ operator (pip install --no-build-isolation builds it "
              "against the torch installed)" % sys.executable)
        return None
    cmd = ["make", "-C", root, "build/libxent_torch.so", "PYTHON=" + sys.executable]
    print("xent: " + " ".join(cmd))
    if subprocess.call(cmd) != 0:
        print("xent: the C++ operator did not build; the Python path serves the loss")
        return None
    return os.path.join(root, "build", "libxent_torch.so")


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        pkg = os.path.join(self.build_lib, "xent")
        os.makedirs(os.path.join(pkg, "lib"), exist_ok=True)
        os.makedirs(os.path.join(pkg, "data"), exist_ok=True)
        root = _repo_root()
        pre = os.environ.get("XENT_PREBUILT")
        if pre:
            lib = pre if os.path.isabs(pre) or os.path.exists(pre) else os.path.join(ROOT, pre)
            if not os.path.isfile(lib):
                raise SystemExit("XENT_PREBUILT=%s: no such file" % pre)
        else:
            if root is None:
                raise SystemExit("xent: not inside the xent checkout (no ../Makefile); set XENT_PREBUILT")
            cmd = ["make", "-C", root, "build/libxent.so"]
            if os.environ.get("CUDA"):
                cmd.append("CUDA=" + os.environ["CUDA"])
            print("xent: " + " ".join(cmd))
            subprocess.check_call(cmd)
            lib = os.path.join(root, "build", "libxent.so")
        shutil.copy2(lib, os.path.join(pkg, "lib", "libxent.so"))
        op = _torch_operator(root, lib, pre)
        if op:
            shutil.copy2(op, os.path.join(pkg, "lib", "libxent_torch.so"))
        sqls = glob.glob(os.path.join(root or ROOT, "tunecache", "*.sql"))
        for f in sqls:
            shutil.copy2(f, os.path.join(pkg, "data", os.path.basename(f)))
        print("xent: bundled %s and %d tune cache(s)" % (lib, len(sqls)))


setup(cmdclass={"build_py": BuildWithLibrary})
