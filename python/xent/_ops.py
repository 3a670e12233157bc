"""The torch layer: custom ops over libxent (torch.library.custom_op), autograd, plans.

Operators (namespace xent), each a torch.library.custom_op with a fake
(meta) implementation, so torch.compile traces through them without a graph
break:

    xent::forward(input, target, weight?, ...) -> (loss, lse)         XENT_OP_FORWARD
    xent::fused(input, target, weight?, ...) -> (loss, lse, grad)     XENT_OP_FUSED, grad a new buffer;
                                                                      autograd: backward = xent::rescale_
    xent::fused_inplace(input!, target, weight?, ...) -> (loss, lse)  XENT_OP_FUSED, grad written over input
    xent::rescale_(grad!, dloss) -> ()                                XENT_OP_RESCALE, in place
    xent::backward(input, target, weight?, lse, dloss, ...) -> grad   XENT_OP_BACKWARD (f16 logits'
                                                                      autograd: forward, then this)

The vocabulary shards' ops are _shards', over this module's plans and launches.

In eager mode a loss that needs its gradient is one C++ operator instead,
torch.ops.xent_cpp.fused (csrc/xent_torch.cpp, loaded from libxent_torch.so beside
libxent.so where it was built for this torch; see _fused_cpp).

Every launch goes to torch.cuda.current_stream(). Plans are cached here per
problem, so a call after the first is a dict lookup and one ctypes call; while
the current stream is being captured into a CUDA graph no plan is ever built
(xent_plan_lookup only), and a problem never run before raises RuntimeError.
"""

import ctypes
import os
import threading
from typing import Optional

import torch
from torch import Tensor

from . import _capi
from . import _reference

__all__ = ["cross_entropy", "CrossEntropyLoss", "check_targets", "set_cpu_emulation", "clear_plans"]

_LOGIT = {torch.float32: _capi.XENT_F32, torch.float16: _capi.XENT_F16, torch.bfloat16: _capi.XENT_BF16}
_INDEX = {torch.int32: _capi.XENT_I32, torch.int64: _capi.XENT_I64}
_RED = _capi.REDUCTIONS
_RED_NAME = {code: name for name, code in _RED.items()}

# --- CPU emulation (tests only): the custom ops compute the float64 reference on CPU tensors --------

_emulate_cpu = False


def set_cpu_emulation(on=True):
    """Let the custom ops accept CPU tensors and compute xent._reference on them (for tests of the
    torch glue on machines without a GPU; not a CPU implementation for use). Returns the old value."""
    global _emulate_cpu
    old, _emulate_cpu = _emulate_cpu, bool(on)
    return old


def _emulating(t):
    return _emulate_cpu and t.device.type == "cpu"


# --- contexts and plans ------------------------------------------------------------------------------

_lock = threading.Lock()
_contexts = {}   # device index -> _capi.Xent
_plans = {}      # problem key -> (plan handle, Xent)


def clear_plans():
    """Forget the Python-side plan cache (the contexts keep their plans; the next call looks them up)."""
    _plans.clear()


# --- the C++ operator of the eager fused loss (csrc/xent_torch.cpp), where it was built -----------------

_cpp = None  # None: not yet looked for; then True or False


def _cpp_op_loaded(xe):
    """Load libxent_torch.so from beside the libxent.so xe uses, once. It needs the torch it was compiled
    against; without it (not built, or another torch) the Python path serves the same calls."""
    global _cpp
    if _cpp is None:
        with _lock:
            if _cpp is None:
                path = os.path.join(os.path.dirname(xe._lib._name), "libxent_torch.so")
                try:
                    torch.ops.load_library(path)
                    _cpp = all(hasattr(torch.ops.xent_cpp, op) for op in ("fused", "fused_inplace"))
                except (OSError, RuntimeError):
                    _cpp = False
    return _cpp


def _fused_cpp(input, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap, inplace):
    """The eager fused loss as one C++ autograd op (torch.ops.xent_cpp.fused, or fused_inplace, the
    gradient over the logits), or None where it was not built. It looks plans up and never builds them:
    on a first call for a problem, they are built here (where capture gets its clear error) and the op
    called again."""
    index = input.device.index
    xe = _contexts.get(index) or _context(index)
    if not (_cpp or (_cpp is None and _cpp_op_loaded(xe))):
        return None
    op = torch.ops.xent_cpp.fused_inplace if inplace else torch.ops.xent_cpp.fused
    args = (input, target, weight, xe._ctx.value, ignore_index, reduction, label_smoothing, z_loss, softcap)
    try:
        return op(*args)
    except RuntimeError as e:
        if "xent: no plan" not in str(e):
            raise
    n, c = input.shape
    # the op's problems: the gradient's rows are the logits' in place, else contiguous (a copy of the
    # logits where theirs are not)
    rs = _row_stride(input) if inplace else c
    _plan(index, _key(input, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap, False,
                      _capi.XENT_OP_FUSED, row_stride=rs))
    _plan(index, _rescale_key(n, c, rs, input.dtype, reduction == 0))
    return op(*args)


def _context(index):
    xe = _contexts.get(index)
    if xe is None:
        with _lock:
            xe = _contexts.get(index)
            if xe is None:
                with torch.cuda.device(index):
                    torch.cuda.init()
                    xe = _capi.Xent(index)
                _contexts[index] = xe
    return xe


def _plan(index, key):
    """key = (n, c, row_stride, dtype, tdtype, reduction, ignore_index, smoothing, has_weights, write_lse,
    op, z_loss, softcap, vocab, class_offset, shards), all codes; the plan handle for it on device index."""
    full = (index,) + key
    hit = _plans.get(full)
    if hit is not None:
        return hit
    xe = _context(index)
    (n, c, rs, dt, tt, red, ii, ls, hw, wl, op, z, sc, vocab, off, shards) = key
    p = _capi.make_problem(xe._lib, n, c, dt, tt, red, ii, ls, hw, wl, rs, op, z, sc, vocab, off, shards)
    h = ctypes.c_void_p(None)
    if torch.cuda.is_current_stream_capturing():
        rc = xe._lib.xent_plan_lookup(xe._ctx, ctypes.byref(p), ctypes.byref(h))
        if rc == _capi.XENT_ENOTFOUND:
            raise RuntimeError(
                "xent: no plan for this problem (%s) while the current CUDA stream is being captured into a "
                "graph; building one compiles and synchronizes, which capture forbids. Run the same call once "
                "before capture (a warm-up step), then capture." % _describe_key(key))
        xe._check(rc, "xent_plan_lookup")
    else:
        xe._check(xe._lib.xent_plan_get(xe._ctx, ctypes.byref(p), ctypes.byref(h)), "xent_plan_get")
    hit = (h, xe)
    _plans[full] = hit
    return hit


def _describe_key(key):
    names = ("n", "c", "row_stride", "dtype", "targets", "reduction", "ignore_index", "label_smoothing",
             "has_weights", "write_lse", "op", "z_loss", "softcap", "vocab", "class_offset", "shards")
    return ", ".join("%s=%s" % kv for kv in zip(names, key))


# The current stream's handle without building a torch.cuda.Stream object (a few µs a launch); the
# private call is the one torch's own compiled kernels use, with the public one where it is missing.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream)


def _direct(t):
    """Whether the kernels may be launched on t's memory straight from Python: a real CUDA tensor outside
    any tracing. Under torch.compile, torch.export or make_fx the tensors are fake (FakeTensor,
    FunctionalTensor: subclasses, with no memory) and the calls must go through the custom ops, whose
    fake implementations trace; is_compiling() alone is False while AOTAutograd traces a backward."""
    return t.is_cuda and type(t) in _REAL and not torch.compiler.is_compiling()


_REAL = (Tensor, torch.nn.Parameter)


def _launch(device, key, logits=None, targets=None, weights=None, loss=None, lse=None, grad=None,
            dloss=None, stats=None):
    index = device.index if device.index is not None else torch.cuda.current_device()
    h, xe = _plan(index, key)
    a = _capi.make_args(logits=logits, targets=targets, weights=weights, loss=loss, lse=lse, grad=grad,
                        dloss=dloss, stats=stats)
    rc = xe._lib.xent_plan_launch(h, ctypes.c_void_p(_raw_stream(index)), ctypes.byref(a))
    if rc:
        xe._check(rc, "xent_plan_launch")


def _overlapping(x):
    """Whether x's rows share memory (stride(0) < C, an expanded tensor, say): the kernels take a row's C
    logits from where the row starts, row_stride apart, so such rows are read from a copy (_apart) and are
    never written over."""
    n, c = x.shape
    return n > 1 and x.stride(0) < c


def _apart(x):
    """x, or a copy of it where its rows share memory."""
    return x.contiguous() if _overlapping(x) else x


def _row_stride(x):
    """The row stride of x's rows as a kernel takes it (C for a single row). Rows that share memory never
    reach a kernel: they are copied (_apart) or refused first."""
    if _overlapping(x):
        raise ValueError("xent: rows that share memory (shape %s, strides %s) reached a plan's key"
                         % (tuple(x.shape), tuple(x.stride())))
    n, c = x.shape
    return c if n == 1 else x.stride(0)


def _key(x, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap, write_lse, op,
         vocab=0, class_offset=0, shards=0, row_stride=None):
    n, c = x.shape
    return (n, c, _row_stride(x) if row_stride is None else row_stride, _LOGIT[x.dtype], _INDEX[target.dtype],
            reduction, int(ignore_index), float(label_smoothing), 1 if weight is not None else 0,
            1 if write_lse else 0, op, float(z_loss), float(softcap), int(vocab), int(class_offset), int(shards))


# --- argument checking (clear Python errors before anything reaches C) ------------------------------

def _check_inputs(input, target, weight=None, what="input", allow_cpu=False, no_rows=False):
    if not isinstance(input, torch.Tensor):
        raise TypeError("xent: %s must be a torch.Tensor (got %s)" % (what, type(input).__name__))
    if not isinstance(target, torch.Tensor):
        raise TypeError("xent: target must be a torch.Tensor (got %s)" % type(target).__name__)
    if input.dim() != 2:
        raise ValueError("xent: %s must be 2-D [N, C] logits (got shape %s); flatten the batch dims first, "
                         "e.g. input.view(-1, C) and target.view(-1)" % (what, tuple(input.shape)))
    if input.dtype not in _LOGIT:
        raise TypeError("xent: %s dtype must be float32, float16 or bfloat16 (got %s)" % (what, input.dtype))
    if target.dtype not in _INDEX:
        raise TypeError("xent: target must hold class indices as int64 or int32 (got %s); class "
                        "probabilities are not supported" % target.dtype)
    n, c = input.shape
    if target.dim() != 1 or target.shape[0] != n:
        raise ValueError("xent: target must be 1-D with N = %d elements (got shape %s)" % (n, tuple(target.shape)))
    if (n == 0 and not no_rows) or (c == 0 and n > 0):
        raise ValueError("xent: empty %s (shape %s)" % (what, tuple(input.shape)))
    dev = input.device
    if dev.type != "cuda" and not (allow_cpu or (_emulate_cpu and dev.type == "cpu")) and dev.type != "meta":
        raise ValueError("xent: %s must be a CUDA tensor (got device %s)" % (what, dev))
    if target.device != dev:
        raise ValueError("xent: target is on device %s but %s is on device %s" % (target.device, what, dev))
    if c > 1 and input.stride(1) != 1:
        raise ValueError("xent: %s must have unit stride along classes (stride(1) == 1; got strides %s); "
                         "call .contiguous()" % (what, tuple(input.stride())))
    if weight is not None:
        if not isinstance(weight, torch.Tensor):
            raise TypeError("xent: weight must be a torch.Tensor or None")
        if weight.dim() != 1 or weight.shape[0] != c:
            raise ValueError("xent: weight must be 1-D with C = %d elements (got shape %s)" % (c, tuple(weight.shape)))
        if not weight.is_floating_point():
            raise TypeError("xent: weight must be a floating-point tensor (got %s)" % weight.dtype)
        if weight.device != dev:
            raise ValueError("xent: weight is on device %s but %s is on device %s" % (weight.device, what, dev))


def _check_options(reduction, label_smoothing, z_loss, softcap, weight=None):
    if reduction not in _RED:
        raise ValueError("xent: reduction must be 'none', 'sum' or 'mean' (got %r)" % (reduction,))
    if not 0.0 <= float(label_smoothing) <= 1.0:
        raise ValueError("xent: label_smoothing must be in [0, 1] (got %r)" % (label_smoothing,))
    if not 0.0 <= float(z_loss) < float("inf"):
        raise ValueError("xent: z_loss must be finite and >= 0 (got %r)" % (z_loss,))
    if not 0.0 <= float(softcap) < float("inf"):
        raise ValueError("xent: softcap must be finite and >= 0, 0 = off (got %r)" % (softcap,))
    if z_loss and weight is not None:
        raise ValueError("xent: z_loss with class weights is not supported")


def _loss_shape(n, reduction):
    return (n,) if reduction == 0 else ()


def _aligned(x):
    """x itself if the gradient buffers torch allocates can share its 16-byte phase and row stride."""
    return x.stride(0) == x.shape[1] and x.data_ptr() % 16 == 0


# --- custom ops --------------------------------------------------------------------------------------

@torch.library.custom_op("xent::forward", mutates_args=())
def _forward_op(input: Tensor, target: Tensor, weight: Optional[Tensor], ignore_index: int, reduction: int,
                label_smoothing: float, z_loss: float, softcap: float, write_lse: bool) -> tuple[Tensor, Tensor]:
    if _emulating(input):
        loss, lse = _reference.forward(input, target, weight, ignore_index, _RED_NAME[reduction],
                                       label_smoothing, z_loss, softcap)
        return loss.float(), (lse.float() if write_lse else input.new_empty((0,), dtype=torch.float32))
    _check_inputs(input, target, weight)
    loss, lse = _forward_impl(input, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap,
                              write_lse)
    return loss, _lse_or_empty(input, lse)


def _lse_or_empty(input, lse):
    """The ops' schemas return a tensor for the lse: an empty one when it was not asked for."""
    return lse if lse is not None else input.new_empty((0,), dtype=torch.float32)


def _forward_rows(input, *args):
    """XENT_OP_FORWARD's (loss, lse): launched straight where the tensors are real, else through
    xent::forward, whose fake implementation traces."""
    return _forward_impl(input, *args) if _direct(input) else torch.ops.xent.forward(input, *args)


def _forward_impl(input, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap, write_lse):
    """(loss, lse), lse None unless write_lse: the eager paths allocate nothing they do not return."""
    input = _apart(input)
    n = input.shape[0]
    loss = input.new_empty(_loss_shape(n, reduction), dtype=torch.float32)
    lse = input.new_empty((n,), dtype=torch.float32) if write_lse else None
    key = _key(input, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap, write_lse,
               _capi.XENT_OP_FORWARD)
    _launch(input.device, key, input, target, weight, loss, lse)
    return loss, lse


@_forward_op.register_fake
def _(input, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap, write_lse):
    n = input.shape[0]
    return (input.new_empty(_loss_shape(n, reduction), dtype=torch.float32),
            input.new_empty((n if write_lse else 0,), dtype=torch.float32))


def _fused_impl(input, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap, write_lse,
                grad):
    n = input.shape[0]
    loss = input.new_empty(_loss_shape(n, reduction), dtype=torch.float32)
    lse = input.new_empty((n,), dtype=torch.float32) if write_lse else None
    key = _key(input, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap, write_lse,
               _capi.XENT_OP_FUSED)
    _launch(input.device, key, input, target, weight, loss, lse, grad=grad)
    return loss, lse


@torch.library.custom_op("xent::fused", mutates_args=())
def _fused_op(input: Tensor, target: Tensor, weight: Optional[Tensor], ignore_index: int, reduction: int,
              label_smoothing: float, z_loss: float, softcap: float,
              write_lse: bool) -> tuple[Tensor, Tensor, Tensor]:
    if _emulating(input):
        loss, lse, g = _reference.fused(input, target, weight, ignore_index, _RED_NAME[reduction],
                                        label_smoothing, z_loss, softcap)
        return (loss.float(), lse.float() if write_lse else input.new_empty((0,), dtype=torch.float32),
                g.to(input.dtype))
    _check_inputs(input, target, weight)
    if not _aligned(input):  # the new gradient must share the logits' row stride and 16-byte phase
        input = input.contiguous() if not input.is_contiguous() else input.clone()
    grad = torch.empty_like(input, memory_format=torch.contiguous_format)
    loss, lse = _fused_impl(input, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap,
                            write_lse, grad)
    return loss, _lse_or_empty(input, lse), grad


@_fused_op.register_fake
def _(input, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap, write_lse):
    n = input.shape[0]
    return (input.new_empty(_loss_shape(n, reduction), dtype=torch.float32),
            input.new_empty((n if write_lse else 0,), dtype=torch.float32),
            torch.empty_like(input, memory_format=torch.contiguous_format))


@torch.library.custom_op("xent::fused_inplace", mutates_args=("input",))
def _fused_inplace_op(input: Tensor, target: Tensor, weight: Optional[Tensor], ignore_index: int,
                      reduction: int, label_smoothing: float, z_loss: float, softcap: float,
                      write_lse: bool) -> tuple[Tensor, Tensor]:
    if _emulating(input):
        loss, lse, g = _reference.fused(input, target, weight, ignore_index, _RED_NAME[reduction],
                                        label_smoothing, z_loss, softcap)
        input.copy_(g)
        return loss.float(), lse.float() if write_lse else input.new_empty((0,), dtype=torch.float32)
    _check_inputs(input, target, weight)
    loss, lse = _fused_impl(input, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap,
                            write_lse, input)
    return loss, _lse_or_empty(input, lse)


@_fused_inplace_op.register_fake
def _(input, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap, write_lse):
    n = input.shape[0]
    return (input.new_empty(_loss_shape(n, reduction), dtype=torch.float32),
            input.new_empty((n if write_lse else 0,), dtype=torch.float32))


@torch.library.custom_op("xent::rescale_", mutates_args=("grad",))
def _rescale_op(grad: Tensor, dloss: Tensor) -> None:
    """grad *= dloss (one float for sum/mean, n for none), rows with factor 1 untouched."""
    if _emulating(grad):
        d = dloss.reshape(-1, 1) if dloss.numel() > 1 else dloss.reshape(())
        grad.copy_((grad.double() * d.double()).to(grad.dtype))
        return
    _rescale_impl(grad, dloss)


def _rescale_key(n, c, row_stride, dtype, rows):
    """The rescale's problem: a dloss a row (rows) or one for all."""
    return (n, c, row_stride, _LOGIT[dtype], _capi.XENT_I64, 0 if rows else 2, -100, 0.0, 0, 0,
            _capi.XENT_OP_RESCALE, 0.0, 0.0, 0, 0, 0)


def _rescale_impl(grad, dloss):
    n, c = grad.shape
    key = _rescale_key(n, c, _row_stride(grad), grad.dtype, dloss.numel() > 1)
    _launch(grad.device, key, logits=grad, grad=grad, dloss=dloss)


@_rescale_op.register_fake
def _(grad, dloss):
    return None


@torch.library.custom_op("xent::backward", mutates_args=())
def _backward_op(input: Tensor, target: Tensor, weight: Optional[Tensor], lse: Tensor, dloss: Tensor,
                 ignore_index: int, reduction: int, label_smoothing: float, z_loss: float, softcap: float) -> Tensor:
    """The gradient of the loss times dloss from the logits and each row's lse, in a new buffer."""
    if _emulating(input):
        return _reference.fused(input, target, weight, ignore_index, _RED_NAME[reduction], label_smoothing, z_loss,
                                softcap, dloss)[2].to(input.dtype)
    _check_inputs(input, target, weight)
    return _backward_impl(input, target, weight, lse, dloss, ignore_index, reduction, label_smoothing, z_loss,
                          softcap)


def _backward_impl(input, target, weight, lse, dloss, ignore_index, reduction, label_smoothing, z_loss, softcap,
                   grad=None, vocab=0, class_offset=0):
    """XENT_OP_BACKWARD (of a vocabulary shard where vocab is given) into grad (input itself, in place), or
    into a new buffer that shares the logits' row stride and 16-byte phase (a copy of the logits' where
    they cannot)."""
    if grad is None:
        if not _aligned(input):
            input = input.contiguous() if not input.is_contiguous() else input.clone()
        grad = torch.empty_like(input, memory_format=torch.contiguous_format)
    key = _key(input, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap, False,
               _capi.XENT_OP_BACKWARD, vocab=vocab, class_offset=class_offset)
    _launch(input.device, key, input, target, weight, lse=lse, grad=grad, dloss=dloss)
    return grad


@_backward_op.register_fake
def _(input, target, weight, lse, dloss, ignore_index, reduction, label_smoothing, z_loss, softcap):
    return torch.empty_like(input, memory_format=torch.contiguous_format)


def _dloss(grad_output, n, reduction):
    """The upstream gradient as xent wants it: contiguous fp32, 1 float (sum, mean) or n (none)."""
    if grad_output.dtype is torch.float32 and grad_output.numel() == (n if reduction == 0 else 1) \
            and grad_output.is_contiguous():
        return grad_output  # already that (autograd's ones for a scalar loss): no conversions to dispatch
    g = grad_output.to(torch.float32)
    g = g.reshape(n) if reduction == 0 else g.reshape(1)
    return g.contiguous()


def _fused_setup(ctx, inputs, output):
    loss, lse, grad = output
    _keep_for_backward(ctx, grad, inputs[4], lse, grad)


def _fused_backward(ctx, grad_loss, *_):
    """The fused forward's gradient, kept in ctx, times grad_loss: launched directly in eager mode, through
    xent::rescale_ where torch.compile traces."""
    (grad,) = ctx.saved_tensors
    if grad_loss is None:
        return torch.zeros_like(grad), None, None, None, None, None, None, None, None
    dl = _dloss(grad_loss, grad.shape[0], ctx.reduction)
    if _direct(grad):
        _rescale_impl(grad, dl)
    else:
        torch.ops.xent.rescale_(grad, dl)
    return grad, None, None, None, None, None, None, None, None


def _keep_for_backward(ctx, grad, reduction, *non_differentiable):
    """What every fused path keeps for _fused_backward (one call: mark_non_differentiable replaces,
    it does not add)."""
    ctx.save_for_backward(grad)
    if non_differentiable:
        ctx.mark_non_differentiable(*non_differentiable)
    ctx.set_materialize_grads(False)
    ctx.reduction = reduction


torch.library.register_autograd("xent::fused", _fused_backward, setup_context=_fused_setup)


class _FusedInplace(torch.autograd.Function):
    """XENT_OP_FUSED writing the gradient over the logits' own storage; backward rescales it in place.
    The logits hold the gradient after the forward: nothing else may use them afterwards. Returns the
    loss, or (loss, lse) with write_lse."""

    @staticmethod
    def forward(ctx, input, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap, write_lse):
        if _direct(input):
            loss, lse = _fused_impl(input, target, weight, ignore_index, reduction, label_smoothing, z_loss,
                                    softcap, write_lse, input)
            # a kernel's write is no torch op: the logits' version counter says they changed, so that a
            # node that saved them for its own backward raises instead of reading the gradient
            torch.autograd.graph.increment_version(input)
        else:
            loss, lse = torch.ops.xent.fused_inplace(input, target, weight, ignore_index, reduction,
                                                     label_smoothing, z_loss, softcap, write_lse)
        _keep_for_backward(ctx, input.detach(), reduction, *((lse,) if write_lse else ()))
        return (loss, lse) if write_lse else loss

    backward = staticmethod(_fused_backward)


class _FusedEager(torch.autograd.Function):
    """Eager mode's fused loss: the kernels launched straight from here, with none of the custom op's
    dispatch on the way (torch.compile traces xent::fused instead, for its graph). Returns the loss, or
    (loss, lse) with write_lse: no lse is allocated or tracked that the caller does not take."""

    @staticmethod
    def forward(ctx, input, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap, write_lse):
        x = input if _aligned(input) else input.contiguous() if not input.is_contiguous() else input.clone()
        grad = torch.empty_like(x, memory_format=torch.contiguous_format)
        loss, lse = _fused_impl(x, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap,
                                write_lse, grad)
        _keep_for_backward(ctx, grad, reduction, *((lse,) if write_lse else ()))
        return (loss, lse) if write_lse else loss

    backward = staticmethod(_fused_backward)


class _ForwardThenBackward(torch.autograd.Function):
    """f16 logits: the forward (loss and lse), then in the backward XENT_OP_BACKWARD given grad_output, so that
    the gradient is rounded to f16 once, after grad_output scales it, as PyTorch rounds it. The fused
    kernel's gradient is rounded at grad_output = 1 and rescaled: under a loss scale (torch.amp's
    GradScaler, the usual way to train in f16) a mean over n rows would hold p_j / n, below f16's
    smallest subnormal for most classes of a large batch, where PyTorch keeps grad_output * p_j / n.
    bf16 has float32's exponent range and keeps the fused kernel. With inplace the backward writes the
    gradient over the logits in eager mode; traced, into a new buffer. Returns the loss, or (loss, lse)
    with write_lse."""

    @staticmethod
    def forward(ctx, input, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap, write_lse,
                inplace):
        args = (target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap)
        loss, lse = _forward_rows(input, *args, True)
        if inplace and _direct(input):
            # the backward will write over the logits: a node that saved them for its own backward raises
            # (their version moved) instead of reading the gradient; this one saves them after the move
            torch.autograd.graph.increment_version(input)
        ctx.save_for_backward(input, target, weight, lse)
        ctx.args = args[2:] + (inplace,)
        if write_lse:
            ctx.mark_non_differentiable(lse)
        ctx.set_materialize_grads(False)
        return (loss, lse) if write_lse else loss

    @staticmethod
    def backward(ctx, grad_loss, *_):
        input, target, weight, lse = ctx.saved_tensors
        ignore_index, reduction, label_smoothing, z_loss, softcap, inplace = ctx.args
        none = (None,) * 9
        if grad_loss is None:
            return (torch.zeros_like(input),) + none
        dl = _dloss(grad_loss, input.shape[0], reduction)
        opts = (ignore_index, reduction, label_smoothing, z_loss, softcap)
        if _direct(input):
            grad = _backward_impl(input, target, weight, lse, dl, *opts, grad=input.detach() if inplace else None)
        else:
            grad = torch.ops.xent.backward(input, target, weight, lse, dl, *opts)
        return (grad,) + none


# --- the public loss ---------------------------------------------------------------------------------

def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0, *,
                  z_loss=0.0, softcap=0.0, return_lse=False, inplace_backward=False):
    """torch.nn.functional.cross_entropy for CUDA logits and class-index targets, by xent.

    input: [N, C] logits, float32, float16 or bfloat16, stride(1) == 1 (rows may be strided), with
    target int64 or int32 [N]; or, as F.cross_entropy takes them, unbatched [C] logits with a 0-d
    target, or [N, C, d1, ..., dk] with target [N, d1, ..., dk] (classes along dim 1: xent takes a
    copy with the classes last, unless every d is 1). weight: optional [C] class weights (converted to
    contiguous float32). The loss is float32; reduction="none" gives it the target's shape.

    Extra options: z_loss adds z_loss * lse^2 per non-ignored row (not with weight); softcap > 0 applies
    softcap * tanh(x / softcap) to the logits first; return_lse=True returns (loss, lse float32 of the
    target's shape, not differentiable); inplace_backward=True writes the gradient over input's storage
    (saves N*C memory; [N, C] input only; input must not be used after this call, by you or by autograd:
    a node that saved it for its own backward raises, its version counter having moved).

    A batch of no rows (N = 0) gives what F.cross_entropy gives: a NaN mean, a sum of 0, an empty none.

    When input requires grad, the forward computes the gradient too (one read of the logits) and the
    backward only rescales it by grad_output (nothing when grad_output is 1): a second backward through
    the same graph (retain_graph=True) is not supported. float16 logits are read again in the backward
    instead, so that their gradient is rounded once, after grad_output (a loss scale) multiplies it.
    """
    opts = (weight, ignore_index, reduction, label_smoothing, z_loss, softcap, return_lse, inplace_backward)
    if isinstance(input, torch.Tensor) and input.dim() == 0:
        raise ValueError("xent: input must be [C], [N, C] or [N, C, d1, ...] logits (got a 0-d tensor)")
    if isinstance(input, torch.Tensor) and isinstance(target, torch.Tensor) and input.dim() != 2:
        x, t, shape = _as_rows(input, target, inplace_backward)
        out = _cross_entropy_rows(x, t, *opts)
        loss, lse = out if return_lse else (out, None)
        if reduction == "none":
            loss = loss.reshape(shape)
        return (loss, lse.reshape(shape)) if return_lse else loss
    return _cross_entropy_rows(input, target, *opts)


def _as_rows(input, target, inplace_backward):
    """F.cross_entropy's other layouts as rows of classes: unbatched [C] with a 0-d target, and
    [N, C, d1, ..., dk] with [N, d1, ..., dk] targets (the classes moved last). Returns the [rows, C]
    logits (autograd flows back through the move), their targets, and the shape of a per-row result."""
    if inplace_backward:
        raise ValueError("xent: inplace_backward takes [N, C] input (got shape %s)" % (tuple(input.shape),))
    if input.dim() == 1:
        if target.dim() != 0:
            raise ValueError("xent: unbatched input [C] takes a 0-d target (got shape %s)" % (tuple(target.shape),))
        return input.unsqueeze(0), target.reshape(1), ()
    want = (input.shape[0],) + tuple(input.shape[2:])
    if tuple(target.shape) != want:
        raise ValueError("xent: input of shape %s takes a target of shape %s (got %s): the classes lie along "
                         "dim 1, as F.cross_entropy takes them; for logits with the classes last, pass "
                         "input.view(-1, C) and target.view(-1)" % (tuple(input.shape), want, tuple(target.shape)))
    return input.movedim(1, -1).reshape(-1, input.shape[1]), target.reshape(-1), want


def _cross_entropy_rows(input, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap,
                        return_lse, inplace_backward):
    """cross_entropy of [N, C] logits."""
    _check_inputs(input, target, weight, no_rows=True)
    _check_options(reduction, label_smoothing, z_loss, softcap, weight)
    if inplace_backward and _overlapping(input):
        raise ValueError("xent: inplace_backward writes the gradient over input, whose rows share memory "
                         "(shape %s, strides %s); pass logits whose rows do not overlap, or leave "
                         "inplace_backward off" % (tuple(input.shape), tuple(input.stride())))
    if input.shape[0] == 0:
        return _no_rows(input, reduction, label_smoothing, return_lse)
    red = _RED[reduction]
    if weight is not None:
        weight = weight.detach().to(torch.float32).contiguous()
    if not target.is_contiguous():
        target = target.contiguous()
    args = (target, weight, int(ignore_index), red, float(label_smoothing), float(z_loss), float(softcap),
            bool(return_lse))
    eager = _direct(input)
    needs_grad = torch.is_grad_enabled() and input.requires_grad
    if needs_grad and input.dtype == torch.float16:
        return _ForwardThenBackward.apply(input, *args, inplace_backward)
    if eager and needs_grad and not return_lse:
        loss = _fused_cpp(input, *args[:-1], inplace_backward)
        if loss is not None:
            return loss
    if not needs_grad:
        loss, lse = _forward_rows(input, *args)
    elif inplace_backward or eager:
        out = (_FusedInplace if inplace_backward else _FusedEager).apply(input, *args)
        loss, lse = out if return_lse else (out, None)
    else:
        loss, lse, _ = torch.ops.xent.fused(input, *args)
    return (loss, lse) if return_lse else loss


def _no_rows(input, reduction, label_smoothing, return_lse):
    """F.cross_entropy of a batch of no rows: the mean is NaN (0 / 0), the sum 0 (NaN when smoothing
    divides by C = 0), none an empty vector; differentiable (the gradient has no elements). Nothing is
    launched."""
    rows = input.float().sum(dim=1)
    if reduction == "none":
        loss = rows
    elif reduction == "sum":
        loss = rows.sum() * (float("nan") if label_smoothing and input.shape[1] == 0 else 1.0)
    else:
        loss = rows.mean()
    return (loss, input.new_empty((0,), dtype=torch.float32)) if return_lse else loss


class CrossEntropyLoss(torch.nn.Module):
    """torch.nn.CrossEntropyLoss's arguments (weight, ignore_index, reduction, label_smoothing; the
    deprecated size_average / reduce too) plus z_loss, softcap and inplace_backward; see cross_entropy."""

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                 label_smoothing=0.0, *, z_loss=0.0, softcap=0.0, inplace_backward=False):
        super().__init__()
        if size_average is not None or reduce is not None:
            from torch.nn import _reduction
            reduction = _reduction.legacy_get_string(size_average, reduce)
        _check_options(reduction, label_smoothing, z_loss, softcap, weight)
        self.register_buffer("weight", weight)
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.label_smoothing = label_smoothing
        self.z_loss = z_loss
        self.softcap = softcap
        self.inplace_backward = inplace_backward

    def forward(self, input, target):
        return cross_entropy(input, target, self.weight, self.ignore_index, self.reduction, self.label_smoothing,
                             z_loss=self.z_loss, softcap=self.softcap, inplace_backward=self.inplace_backward)

    def extra_repr(self):
        s = "reduction=%r, ignore_index=%d, label_smoothing=%g" % (self.reduction, self.ignore_index,
                                                                    self.label_smoothing)
        if self.z_loss:
            s += ", z_loss=%g" % self.z_loss
        if self.softcap:
            s += ", softcap=%g" % self.softcap
        if self.inplace_backward:
            s += ", inplace_backward=True"
        return s


def check_targets(device=None):
    """Synchronize the current stream of device (torch's current CUDA device by default) and raise
    ValueError if any xent kernel launched there since the last check saw a target outside [0, C) that is
    not ignore_index (those rows' losses are NaN); the flag is then cleared."""
    if isinstance(device, torch.Tensor):
        device = device.device
    dev = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
    if dev.type != "cuda":
        raise ValueError("xent.check_targets: a CUDA device is needed (got %s)" % dev)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    xe = _context(index)
    rc = xe.check_targets(stream=torch.cuda.current_stream(index).cuda_stream)
    if rc == _capi.XENT_EBADTARGET:
        raise ValueError("xent: a target outside [0, C) that is not ignore_index was seen since the last check "
                         "(the losses of those rows are NaN)")
