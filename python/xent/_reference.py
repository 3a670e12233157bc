"""Float64 PyTorch reference of every xent operation (the semantics of include/xent.h).

Used by the tests (the expected values) and by the CPU emulation of the custom
ops (xent._ops.set_cpu_emulation), which lets the torch glue (custom ops,
autograd, torch.compile, shards) be tested on machines without a GPU. Not fast.

Shard statistics (the convention of this reference; the GPU kernels' stats
are only ever consumed by their own XENT_OP_COMBINE): stats[0] is the row's
log-sum-exp over the shard's columns, stats[1] the row's linear part
    (1 - eps) * x[t] * [t in shard] + eps / vocab * sum over the shard of x
with x the (soft-capped) logits, so that loss = lse - sum over shards of the
linear parts (+ z_loss * lse^2), zero for ignored rows.
"""

import torch

__all__ = ["softcap_fn", "loss_and_lse", "forward", "fused", "shard_stats", "combine", "shard_backward"]


def softcap_fn(x, softcap):
    return softcap * torch.tanh(x / softcap) if softcap > 0 else x


def _denominator(target, weight, ignore_index, c):
    valid = target != ignore_index
    if weight is not None:
        t = torch.where(valid, target, torch.zeros_like(target)).clamp(0, c - 1)
        return (weight.double()[t] * valid).sum()
    return valid.sum().double()


def loss_and_lse(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                 z_loss=0.0, softcap=0.0):
    """(loss, lse) computed in float64, differentiable with respect to input."""
    x = softcap_fn(input.double(), softcap)
    n, c = x.shape
    w = weight.double() if weight is not None else None
    target = target.long()
    lse = torch.logsumexp(x, dim=1)
    per_row = torch.nn.functional.cross_entropy(x, target, weight=w, ignore_index=ignore_index,
                                                reduction="none", label_smoothing=label_smoothing)
    valid = target != ignore_index
    if z_loss > 0:
        per_row = per_row + z_loss * lse.square() * valid
    if reduction == "none":
        loss = per_row
    elif reduction == "sum":
        loss = per_row.sum()
    else:
        loss = per_row.sum() / _denominator(target, weight, ignore_index, c)
    return loss, lse


def forward(input, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap):
    with torch.no_grad():
        return loss_and_lse(input, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap)


def fused(input, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap, dloss=None):
    """(loss, lse, gradient of loss * dloss with respect to input), all float64, the gradient in closed
    form (no autograd, so that it also runs inside a custom op's implementation):
    d loss_i / d x_j = (1 - eps) w_t (p_j - [j = t]) + eps / C (W p_j - w_j) + 2 z lse p_j, W = sum of w."""
    with torch.no_grad():
        loss, lse = loss_and_lse(input, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap)
        x0 = input.double()
        x = softcap_fn(x0, softcap)
        n, c = x.shape
        t = target.long()
        valid = t != ignore_index
        tc = torch.where(valid, t, torch.zeros_like(t)).clamp(0, c - 1)
        p = torch.exp(x - lse[:, None])
        onehot = torch.nn.functional.one_hot(tc, c).double()
        eps = float(label_smoothing)
        if weight is not None:
            w = weight.double()
            wt = w[tc][:, None]
            g = (1 - eps) * wt * (p - onehot) + eps / c * (w.sum() * p - w[None, :])
        else:
            g = (1 - eps) * (p - onehot) + eps * (p - 1.0 / c)
        g = g + 2.0 * z_loss * lse[:, None] * p
        if dloss is None:
            d = torch.ones(n if reduction == "none" else 1, dtype=torch.float64, device=x.device)
        else:
            d = dloss.double().reshape(-1)
        scale = valid.double() * (d if reduction == "none" else d[0])
        if reduction == "mean":
            scale = scale / _denominator(t, weight, ignore_index, c)
        g = g * scale[:, None]
        if softcap > 0:
            g = g * (1.0 - torch.tanh(x0 / softcap).square())
    return loss, lse, g


def _shard_contrib(target, class_offset, c, vocab, label_smoothing, dtype):
    n = target.shape[0]
    cols = torch.arange(class_offset, class_offset + c, device=target.device)
    onehot = (target.long()[:, None] == cols[None, :]).to(dtype)
    return (1.0 - label_smoothing) * onehot + label_smoothing / vocab * torch.ones(n, c, dtype=dtype,
                                                                                  device=target.device)


def shard_stats(input, target, class_offset, vocab, ignore_index=-100, label_smoothing=0.0, softcap=0.0):
    """[2, n] float64: the rows' lse over the shard, then their linear part."""
    x = softcap_fn(input.double(), softcap)
    n, c = x.shape
    lse = torch.logsumexp(x, dim=1)
    lin = (x * _shard_contrib(target, class_offset, c, vocab, label_smoothing, x.dtype)).sum(1)
    return torch.stack([lse, lin])


def combine(stats, target, ignore_index=-100, reduction="mean", z_loss=0.0):
    """stats: [k, 2, n]; returns (loss, global lse) in float64."""
    stats = stats.double().reshape(stats.shape[0], 2, -1)
    lse = torch.logsumexp(stats[:, 0, :], dim=0)
    lin = stats[:, 1, :].sum(0)
    valid = target != ignore_index
    per_row = torch.where(valid, lse - lin + z_loss * lse.square(), torch.zeros_like(lse))
    if reduction == "none":
        return per_row, lse
    if reduction == "sum":
        return per_row.sum(), lse
    return per_row.sum() / valid.sum().double(), lse


def shard_backward(input, target, lse, dloss, class_offset, vocab, ignore_index=-100, reduction="mean",
                   label_smoothing=0.0, z_loss=0.0, softcap=0.0):
    """The gradient of the combined loss * dloss with respect to the shard's logits, float64."""
    x0 = input.double()
    x = softcap_fn(x0, softcap)
    n, c = x.shape
    lse = lse.double()
    p = torch.exp(x - lse[:, None])
    g = p * (1.0 + 2.0 * z_loss * lse[:, None]) - _shard_contrib(target, class_offset, c, vocab,
                                                                 label_smoothing, x.dtype)
    valid = (target != ignore_index).double()
    d = dloss.double().reshape(-1)
    if reduction == "none":
        scale = d * valid
    elif reduction == "sum":
        scale = d[0] * valid
    else:
        scale = d[0] * valid / valid.sum()
    g = g * scale[:, None]
    if softcap > 0:
        g = g * (1.0 - torch.tanh(x0 / softcap).square())
    return g
