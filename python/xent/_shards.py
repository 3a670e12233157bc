"""Vocabulary shards (tensor parallelism): a shard's per-row partials, their combine, a shard's gradient,
and the loss over a process group that all-gathers the partials.

Operators (namespace xent), torch.library custom ops with fake implementations like those of _ops:

    xent::shard_stats(input, target, ...) -> stats[2, n]              XENT_OP_FORWARD on a vocabulary shard
    xent::combine(stats[k, 2, n], target, ...) -> (loss, lse)         XENT_OP_COMBINE
    xent::shard_backward(input, target, lse, dloss, ...) -> grad      XENT_OP_BACKWARD on a shard
"""

import torch
from torch import Tensor

from . import _capi
from . import _reference
from ._ops import (_INDEX, _LOGIT, _RED, _RED_NAME, _apart, _backward_impl, _check_inputs, _check_options, _dloss,
                   _emulating, _key, _launch, _loss_shape, cross_entropy)

__all__ = ["shard_stats", "combine", "shard_backward", "vocab_parallel_cross_entropy"]


def _check_shard(input, target, class_offset, vocab):
    c = input.shape[1]
    if not 0 <= int(class_offset) <= int(vocab) - c:
        raise ValueError("xent: the shard's columns [%d, %d) must lie inside the vocabulary [0, %d)"
                         % (class_offset, class_offset + c, vocab))


@torch.library.custom_op("xent::shard_stats", mutates_args=())
def _shard_stats_op(input: Tensor, target: Tensor, class_offset: int, vocab: int, ignore_index: int,
                    label_smoothing: float, softcap: float) -> Tensor:
    n, c = input.shape
    if _emulating(input):
        return _reference.shard_stats(input, target, class_offset, vocab, ignore_index, label_smoothing,
                                      softcap).float()
    input = _apart(input)
    stats = torch.empty((2, n), dtype=torch.float32, device=input.device)
    loss = torch.empty((), dtype=torch.float32, device=input.device)
    key = _key(input, target, None, ignore_index, 2, label_smoothing, 0.0, softcap, False, _capi.XENT_OP_FORWARD,
               vocab=vocab, class_offset=class_offset)
    _launch(input.device, key, input, target, loss=loss, stats=stats)
    return stats


@_shard_stats_op.register_fake
def _(input, target, class_offset, vocab, ignore_index, label_smoothing, softcap):
    return input.new_empty((2, input.shape[0]), dtype=torch.float32)


@torch.library.custom_op("xent::combine", mutates_args=())
def _combine_op(stats: Tensor, target: Tensor, vocab: int, ignore_index: int, reduction: int,
                label_smoothing: float, z_loss: float, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    k, _, n = stats.shape
    if _emulating(stats):
        loss, lse = _reference.combine(stats, target, ignore_index, _RED_NAME[reduction], z_loss)
        return loss.float(), lse.float()
    loss = torch.empty(_loss_shape(n, reduction), dtype=torch.float32, device=stats.device)
    lse = torch.empty((n,), dtype=torch.float32, device=stats.device)
    key = (n, int(vocab), int(vocab), _LOGIT[dtype], _INDEX[target.dtype], reduction, int(ignore_index),
           float(label_smoothing), 0, 1, _capi.XENT_OP_COMBINE, float(z_loss), 0.0, 0, 0, k)
    _launch(stats.device, key, targets=target, loss=loss, lse=lse, stats=stats)
    return loss, lse


@_combine_op.register_fake
def _(stats, target, vocab, ignore_index, reduction, label_smoothing, z_loss, dtype):
    n = stats.shape[2]
    return (stats.new_empty(_loss_shape(n, reduction), dtype=torch.float32),
            stats.new_empty((n,), dtype=torch.float32))


@torch.library.custom_op("xent::shard_backward", mutates_args=())
def _shard_backward_op(input: Tensor, target: Tensor, lse: Tensor, dloss: Tensor, class_offset: int, vocab: int,
                       ignore_index: int, reduction: int, label_smoothing: float, z_loss: float,
                       softcap: float) -> Tensor:
    if _emulating(input):
        return _reference.shard_backward(input, target, lse, dloss, class_offset, vocab, ignore_index,
                                         _RED_NAME[reduction], label_smoothing, z_loss, softcap).to(input.dtype)
    return _backward_impl(input, target, None, lse, dloss, ignore_index, reduction, label_smoothing, z_loss, softcap,
                          vocab=vocab, class_offset=class_offset)


@_shard_backward_op.register_fake
def _(input, target, lse, dloss, class_offset, vocab, ignore_index, reduction, label_smoothing, z_loss, softcap):
    return torch.empty_like(input, memory_format=torch.contiguous_format)


def shard_stats(logits_shard, target, class_offset, vocab, *, ignore_index=-100, label_smoothing=0.0, softcap=0.0):
    """The per-row partials of one vocabulary shard: a float32 [2, N] tensor (the rows' lse over the shard's
    columns, then their linear part). logits_shard [N, c] holds classes [class_offset, class_offset + c) of a
    vocabulary of `vocab` classes; target [N] indexes the whole vocabulary. Not differentiable."""
    _check_inputs(logits_shard, target, what="logits_shard")
    _check_options("mean", label_smoothing, 0.0, softcap)
    _check_shard(logits_shard, target, class_offset, vocab)
    return torch.ops.xent.shard_stats(logits_shard.detach(), target.contiguous(), int(class_offset), int(vocab),
                                      int(ignore_index), float(label_smoothing), float(softcap))


def combine(stats, target, vocab, *, ignore_index=-100, reduction="mean", label_smoothing=0.0, z_loss=0.0,
            dtype=torch.float32):
    """The loss and every row's global lse from k shards' partials: stats is [k, 2, N] float32 (the
    shard_stats of the k shards stacked, in any order) or a list of k [2, N] tensors. Returns (loss, lse)."""
    if isinstance(stats, (list, tuple)):
        stats = torch.stack(list(stats))
    if not isinstance(stats, torch.Tensor) or stats.dim() != 3 or stats.shape[1] != 2:
        raise ValueError("xent.combine: stats must be [k, 2, N] (got %s)"
                         % ((tuple(stats.shape) if isinstance(stats, torch.Tensor) else type(stats).__name__),))
    if stats.dtype != torch.float32:
        raise TypeError("xent.combine: stats must be float32 (got %s)" % stats.dtype)
    n = stats.shape[2]
    if not isinstance(target, torch.Tensor) or target.dim() != 1 or target.shape[0] != n:
        raise ValueError("xent.combine: target must be 1-D with N = %d elements" % n)
    if target.dtype not in _INDEX:
        raise TypeError("xent.combine: target must be int64 or int32 (got %s)" % target.dtype)
    if target.device != stats.device:
        raise ValueError("xent.combine: target is on %s but stats on %s" % (target.device, stats.device))
    if stats.device.type != "cuda" and not _emulating(stats) and stats.device.type != "meta":
        raise ValueError("xent.combine: stats must be a CUDA tensor (got %s)" % stats.device)
    if dtype not in _LOGIT:
        raise TypeError("xent.combine: dtype must be the logits' dtype (float32, float16, bfloat16)")
    _check_options(reduction, label_smoothing, z_loss, 0.0)
    return torch.ops.xent.combine(stats.contiguous(), target.contiguous(), int(vocab), int(ignore_index),
                                  _RED[reduction], float(label_smoothing), float(z_loss), dtype)


def shard_backward(logits_shard, target, lse, dloss, class_offset, vocab, *, ignore_index=-100, reduction="mean",
                   label_smoothing=0.0, z_loss=0.0, softcap=0.0):
    """The gradient of the combined loss (times dloss: 1 float for sum/mean, N for none) with respect to one
    shard's logits, from the global lse that combine returned. Returns a tensor like logits_shard."""
    _check_inputs(logits_shard, target, what="logits_shard")
    _check_options(reduction, label_smoothing, z_loss, softcap)
    _check_shard(logits_shard, target, class_offset, vocab)
    n = logits_shard.shape[0]
    if not isinstance(lse, torch.Tensor) or lse.shape != (n,) or lse.dtype != torch.float32:
        raise ValueError("xent.shard_backward: lse must be a float32 [N] tensor (from combine)")
    if not isinstance(dloss, torch.Tensor):
        dloss = torch.tensor(float(dloss), device=logits_shard.device)
    dl = _dloss(dloss, n, _RED[reduction])
    return torch.ops.xent.shard_backward(logits_shard.detach(), target.contiguous(), lse.contiguous(), dl,
                                         int(class_offset), int(vocab), int(ignore_index), _RED[reduction],
                                         float(label_smoothing), float(z_loss), float(softcap))


class _VocabParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits_shard, target, class_offset, vocab, group, ignore_index, reduction, label_smoothing,
                z_loss, softcap):
        stats = shard_stats(logits_shard, target, class_offset, vocab, ignore_index=ignore_index,
                            label_smoothing=label_smoothing, softcap=softcap)
        if group is not None:
            import torch.distributed as dist
            k = dist.get_world_size(group)
            # gathered along dim 0 and viewed as [k, 2, N]: NCCL takes either layout, Gloo this one only
            gathered = stats.new_empty((k * 2, stats.shape[1]))
            dist.all_gather_into_tensor(gathered, stats.contiguous(), group=group)
            gathered = gathered.view(k, 2, stats.shape[1])
        else:
            gathered = stats.unsqueeze(0)
        loss, lse = combine(gathered, target, vocab, ignore_index=ignore_index, reduction=reduction,
                            label_smoothing=label_smoothing, z_loss=z_loss, dtype=logits_shard.dtype)
        ctx.save_for_backward(logits_shard, target, lse)
        ctx.args = (class_offset, vocab, ignore_index, reduction, label_smoothing, z_loss, softcap)
        ctx.mark_non_differentiable(lse)
        return loss, lse

    @staticmethod
    def backward(ctx, grad_loss, grad_lse):
        logits_shard, target, lse = ctx.saved_tensors
        class_offset, vocab, ignore_index, reduction, label_smoothing, z_loss, softcap = ctx.args
        g = shard_backward(logits_shard, target, lse, grad_loss, class_offset, vocab, ignore_index=ignore_index,
                           reduction=reduction, label_smoothing=label_smoothing, z_loss=z_loss, softcap=softcap)
        return g, None, None, None, None, None, None, None, None, None


def vocab_parallel_cross_entropy(logits_shard, target, class_offset, vocab, group=None, *, ignore_index=-100,
                                 reduction="mean", label_smoothing=0.0, z_loss=0.0, softcap=0.0, return_lse=False):
    """Cross-entropy over a vocabulary split across the ranks of a process group (tensor parallelism).

    Each rank passes its logits shard [N, c] (classes [class_offset, class_offset + c) of `vocab`) and the
    same target [N]; the shards' partials (2N floats per rank) are all-gathered over `group` with
    torch.distributed and combined, so every rank gets the same loss, and the backward gives each rank the
    gradient of its own columns. group=None: a single shard (this process holds the whole vocabulary
    when class_offset == 0 and c == vocab)."""
    _check_inputs(logits_shard, target, what="logits_shard")
    _check_options(reduction, label_smoothing, z_loss, softcap)
    _check_shard(logits_shard, target, class_offset, vocab)
    if group is None and logits_shard.shape[1] != vocab:
        raise ValueError("xent.vocab_parallel_cross_entropy: without a group the shard must be the whole "
                         "vocabulary (c = %d, vocab = %d)" % (logits_shard.shape[1], vocab))
    if logits_shard.shape[1] == vocab:  # one shard: the whole vocabulary, the fused loss
        return cross_entropy(logits_shard, target, None, ignore_index, reduction, label_smoothing, z_loss=z_loss,
                             softcap=softcap, return_lse=return_lse)
    loss, lse = _VocabParallel.apply(logits_shard, target, int(class_offset), int(vocab), group, int(ignore_index),
                                     reduction, float(label_smoothing), float(z_loss), float(softcap))
    return (loss, lse) if return_lse else loss
