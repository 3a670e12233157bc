"""Shared by the package's tests: python/ on sys.path (so the tests run from a checkout without
installing), and the facts that decide what is skipped."""

import os
import shutil
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.normpath(os.path.join(HERE, ".."))
ROOT = os.path.normpath(os.path.join(PYDIR, ".."))
if os.environ.get("XENT_TEST_INSTALLED") != "1" and PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)  # XENT_TEST_INSTALLED=1: test the pip-installed package instead

try:
    import torch
    TORCH_ERROR = None
except Exception as e:  # noqa: BLE001 - any failure to import means: no torch tests
    torch = None
    TORCH_ERROR = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")

HAS_TORCH = torch is not None
HAS_CUDA = HAS_TORCH and torch.cuda.is_available()
CC = shutil.which("cc") or shutil.which("gcc")

needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not importable (%s)" % TORCH_ERROR)
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device (or no torch)")


def library_or_skip():
    from xent import _capi
    path = _capi.default_library_path()
    if not os.path.exists(path):
        pytest.skip("libxent.so not built (%s); run make build/libxent.so" % path)
    return _capi.load_library(path)
