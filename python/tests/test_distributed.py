"""Vocabulary-parallel cross-entropy across processes (bench/vocab_parallel.py's check): every rank's loss
and gradient columns against the float64 reference of the whole vocabulary, for each dtype and option of
the shard API. On the CPU the ranks use Gloo and xent's float64 emulation (the collectives and the shard
algebra); on GPUs, NCCL and the kernels, a rank a GPU."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import HAS_TORCH, ROOT, needs_torch, torch

SCRIPT = os.path.join(ROOT, "bench", "vocab_parallel.py")
GPUS = torch.cuda.device_count() if HAS_TORCH and torch.cuda.is_available() else 0
# what the device machines need for NCCL between GPUs of one host (no NVLink multicast)
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


def _run(cmd, env=None):
    p = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, **(env or {})), capture_output=True, text=True,
                       timeout=600)
    out = p.stdout + p.stderr
    return p.returncode, out


@needs_torch
@pytest.mark.parametrize("k", [2, 4])
def test_shards_over_gloo_match_unsharded(k):
    rc, out = _run([sys.executable, SCRIPT, "--cpu", "--nproc", str(k), "--check-only"])
    assert rc == 0, out[-3000:]
    assert "check: %d ranks" % k in out and "all match the unsharded float64 reference" in out, out[-3000:]


# one GPU: one rank holds the whole vocabulary (NCCL takes a GPU a rank), so the all-gather is a copy, but
# the shard kernels, the combine and the backward still run through a process group over NCCL
@pytest.mark.skipif(GPUS < 1, reason="no GPU")
@pytest.mark.parametrize("k", [k for k in (1, 2, 4, 8) if k <= max(GPUS, 1)])
def test_shards_over_nccl_match_unsharded(k):
    torchrun = shutil.which("torchrun")
    cmd = ([torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]) + [
        "--standalone", "--nproc-per-node", str(k), SCRIPT, "--check-only"]
    rc, out = _run(cmd, NCCL_ENV)
    assert rc == 0, out[-3000:]
    assert "check: %d ranks" % k in out and "all match the unsharded float64 reference" in out, out[-3000:]
