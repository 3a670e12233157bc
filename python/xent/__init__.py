"""xent: fast CUDA cross-entropy (loss and gradient in one read of the logits) for PyTorch.

    import xent
    loss = xent.cross_entropy(logits, targets)          # as torch.nn.functional.cross_entropy
    loss_fn = xent.CrossEntropyLoss(z_loss=1e-4)         # as torch.nn.CrossEntropyLoss, plus options

The kernels come from libxent.so (bundled in the package; $XENT_LIB overrides it),
generated and compiled at run time with NVRTC for the GPU at hand and tuned per
problem from the shipped tune caches (bundled; $XENT_DATADIR overrides them).
Importing needs no GPU: the CUDA driver is loaded at the first launch.
"""

import os

from . import _capi
from ._capi import XentError, load_library, default_library_path

__version__ = "0.1.0"

if not os.environ.get("XENT_DATADIR"):
    _d = _capi.default_datadir()
    if _d:
        os.environ["XENT_DATADIR"] = _d  # libxent reads it when it opens a device's shipped tune cache

try:
    import torch as _torch  # noqa: F401
except ImportError as _e:  # the binding (xent._capi) works without torch; the loss needs it
    _torch_error = _e

    def _needs_torch(*args, **kwargs):
        raise ImportError("xent's PyTorch API needs torch (import failed: %s)" % _torch_error)

    cross_entropy = CrossEntropyLoss = check_targets = shard_stats = combine = shard_backward = _needs_torch
    vocab_parallel_cross_entropy = _needs_torch
    HAS_TORCH = False
else:
    from ._ops import cross_entropy, CrossEntropyLoss, check_targets
    from ._shards import shard_stats, combine, shard_backward, vocab_parallel_cross_entropy
    HAS_TORCH = True

__all__ = ["cross_entropy", "CrossEntropyLoss", "check_targets", "shard_stats", "combine", "shard_backward",
           "vocab_parallel_cross_entropy", "XentError", "load_library", "default_library_path", "HAS_TORCH"]
