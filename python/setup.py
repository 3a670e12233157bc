"""Build hook: put libxent.so and the shipped tune caches inside the package.

`pip install ./python` runs `make -C <repo root> build/libxent.so` (needs gcc, make, the
CUDA toolkit's NVRTC and SQLite headers) unless XENT_PREBUILT names an already built
libxent.so, which is then copied as is (for machines that cannot build, e.g.
XENT_PREBUILT=build/libxent.so pip install --no-build-isolation ./python). The tune
caches (tunecache/*.sql) are copied from the checkout into xent/data/.
"""

import glob
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))


def _repo_root():
    if os.path.isfile(os.path.join(ROOT, "include", "xent.h")) and os.path.isfile(os.path.join(ROOT, "Makefile")):
        return ROOT
    return None


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
        sqls = glob.glob(os.path.join(root or ROOT, "tunecache", "*.sql"))
        for f in sqls:
            shutil.copy2(f, os.path.join(pkg, "data", os.path.basename(f)))
        print("xent: bundled %s and %d tune cache(s)" % (lib, len(sqls)))


setup(cmdclass={"build_py": BuildWithLibrary})
