"""Tests of the torch layer that need torch but no GPU: argument errors, custom-op registration, fake
(meta) implementations, opcheck, and the autograd / torch.compile / shard glue run through the CPU
emulation of the ops (xent._ops.set_cpu_emulation: the custom ops compute the float64 reference)."""

import pytest

from conftest import HAS_TORCH, TORCH_ERROR

if not HAS_TORCH:
    pytest.skip("torch is not importable (%s)" % TORCH_ERROR, allow_module_level=True)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import xent  # noqa: E402
from xent import _ops, _reference  # noqa: E402

OPS = ["forward", "fused", "fused_inplace", "rescale_", "backward", "shard_stats", "combine", "shard_backward"]


@pytest.fixture
def emulate():
    old = _ops.set_cpu_emulation(True)
    yield
    _ops.set_cpu_emulation(old)


def _x(n=6, c=10, dtype=torch.float32, grad=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, generator=g).to(dtype)
    t = torch.randint(0, c, (n,), generator=g)
    return x.requires_grad_(grad), t


# --- registration and argument errors --------------------------------------------------------------

def test_cpp_operator_registers_for_cuda_only():
    """libxent_torch.so (make build/libxent_torch.so PYTHON=...), where it was built for this torch: it
    loads beside libxent.so, declares xent_cpp::fused and fused_inplace, and has no kernel for CPU
    tensors (xent's checks come first in cross_entropy, so this is the dispatcher's own refusal)."""
    import os
    from conftest import library_or_skip
    lib = library_or_skip()
    path = os.path.join(os.path.dirname(lib._name), "libxent_torch.so")
    if not os.path.exists(path):
        pytest.skip("libxent_torch.so not built (%s)" % path)
    torch.ops.load_library(path)
    for op, writes in (("fused", False), ("fused_inplace", True)):
        schema = getattr(torch.ops.xent_cpp, op).default._schema
        assert schema.name == "xent_cpp::" + op
        assert [a.name for a in schema.arguments] == ["input", "target", "weight", "context", "ignore_index",
                                                      "reduction", "label_smoothing", "z_loss", "softcap"]
        # the in-place op declares that it writes its input (the gradient goes over the logits)
        info = schema.arguments[0].alias_info
        assert (info is not None and info.is_write) == writes, op
        x, t = _x(grad=True)
        with pytest.raises(NotImplementedError, match="CPU"):
            getattr(torch.ops.xent_cpp, op)(x, t, None, 0, -100, 2, 0.0, 0.0, 0.0)


def test_ops_registered():
    for name in OPS:
        op = getattr(torch.ops.xent, name).default
        assert op._schema.name == "xent::" + name
    assert torch.ops.xent.fused_inplace.default._schema.arguments[0].alias_info.is_write
    assert torch.ops.xent.rescale_.default._schema.arguments[0].alias_info.is_write
    assert not torch.ops.xent.fused.default._schema.arguments[0].alias_info


def test_cpu_tensor_is_value_error():
    x, t = _x()
    with pytest.raises(ValueError, match="CUDA"):
        xent.cross_entropy(x, t)


@pytest.mark.parametrize("make, exc, match", [
    (lambda x, t: (x.double(), t), TypeError, "float32"),
    (lambda x, t: (x, t.float()), TypeError, "int64"),
    (lambda x, t: (x[0], t), ValueError, "0-d target"),
    (lambda x, t: (x.unsqueeze(0), t), ValueError, "classes last"),
    (lambda x, t: (x[0, 0], t[0]), ValueError, r"\[C\], \[N, C\] or"),
    (lambda x, t: (x, t[:-1]), ValueError, "N = 6"),
    (lambda x, t: (x, t.view(2, 3)), ValueError, "1-D"),
    (lambda x, t: (x.t(), torch.zeros(10, dtype=torch.long, device=x.device)), ValueError, "stride"),
    (lambda x, t: ([[1.0]], t), TypeError, "torch.Tensor"),
])
def test_argument_errors(make, exc, match):
    x, t = _x()
    x, t = x.to("meta"), t.to("meta")
    x, t = make(x, t)
    with pytest.raises(exc, match=match):
        xent.cross_entropy(x, t)


def test_option_errors():
    x, t = _x()
    x, t = x.to("meta"), t.to("meta")
    with pytest.raises(ValueError, match="reduction"):
        xent.cross_entropy(x, t, reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing"):
        xent.cross_entropy(x, t, label_smoothing=1.5)
    with pytest.raises(ValueError, match="z_loss"):
        xent.cross_entropy(x, t, z_loss=-1.0)
    with pytest.raises(ValueError, match="softcap"):
        xent.cross_entropy(x, t, softcap=-2.0)
    with pytest.raises(ValueError, match="z_loss with class weights"):
        xent.cross_entropy(x, t, torch.ones(10, device="meta"), z_loss=1e-4)
    with pytest.raises(ValueError, match="weight must be 1-D with C = 10"):
        xent.cross_entropy(x, t, torch.ones(9, device="meta"))
    with pytest.raises(ValueError, match="target is on device cpu"):
        xent.cross_entropy(x, torch.zeros(6, dtype=torch.long))
    with pytest.raises(ValueError, match="reduction"):
        xent.CrossEntropyLoss(reduction="bad")
    with pytest.raises(ValueError, match="vocabulary"):
        xent.shard_stats(x, t, class_offset=95, vocab=100)
    with pytest.raises(ValueError, match="stats must be"):
        xent.combine(torch.zeros(3, 2, device="meta"), t, 100)


def test_check_targets_needs_cuda():
    with pytest.raises(ValueError, match="CUDA"):
        xent.check_targets("cpu")


# --- fake (meta) implementations: shapes without running anything ----------------------------------

@pytest.mark.parametrize("reduction, shape", [("mean", ()), ("sum", ()), ("none", (6,))])
def test_meta_shapes(reduction, shape):
    x, t = _x()
    x, t = x.to("meta").requires_grad_(True), t.to("meta")
    loss, lse = xent.cross_entropy(x, t, reduction=reduction, return_lse=True)
    assert loss.shape == shape and loss.dtype == torch.float32 and lse.shape == (6,)
    with torch.no_grad():
        loss = xent.cross_entropy(x.to(torch.bfloat16), t, reduction=reduction)
    assert loss.shape == shape and loss.device.type == "meta"


def test_fake_tensor_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        x = torch.empty(32, 50, dtype=torch.bfloat16, device="cuda")
        t = torch.empty(32, dtype=torch.int64, device="cuda")
        loss, lse, grad = torch.ops.xent.fused(x, t, None, -100, 0, 0.0, 0.0, 0.0, True)
        assert loss.shape == (32,) and lse.shape == (32,) and grad.shape == (32, 50)
        assert grad.dtype == torch.bfloat16 and grad.device.type == "cuda"
        stats = torch.ops.xent.shard_stats(x, t, 50, 200, -100, 0.0, 0.0)
        assert stats.shape == (2, 32)
        l2, lse2 = torch.ops.xent.combine(torch.stack([stats] * 4), t, 200, -100, 2, 0.0, 0.0, torch.bfloat16)
        assert l2.shape == () and lse2.shape == (32,)
        g = torch.ops.xent.shard_backward(x, t, lse2, l2.reshape(1), 50, 200, -100, 2, 0.0, 0.0, 0.0)
        assert g.shape == x.shape and g.dtype == x.dtype


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_fake_cuda_forward_and_backward(inplace, reduction):
    """The public loss and its backward on fake CUDA tensors (what AOTAutograd traces a compiled backward
    with): every call must reach the custom ops' fake implementations, none a launch or a data pointer."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        x = torch.randn(8, 100, device="cuda", requires_grad=True)
        t = torch.randint(0, 100, (8,), device="cuda")
        loss = xent.cross_entropy(x * 2, t, reduction=reduction, inplace_backward=inplace)
        # the backward called directly: the autograd engine itself needs a real device for its streams
        grads = loss.grad_fn.apply(torch.ones_like(loss), None)
        grad = grads[0] if isinstance(grads, tuple) else grads
        assert grad.shape == x.shape and grad.device.type == "cuda"


# --- opcheck and the glue through the CPU emulation ------------------------------------------------

def _opcheck(op, args, tests=None):
    kw = {} if tests is None else {"test_utils": tests}
    torch.library.opcheck(op, args, **kw)


def test_opcheck(emulate):
    x, t = _x(grad=True)
    w = torch.rand(10)
    for red in (0, 1, 2):
        _opcheck(torch.ops.xent.forward.default, (x.detach(), t, None, -100, red, 0.1, 1e-3, 0.0, True))
        # fused: test_aot_dispatch_dynamic is left out: its partitioner rejects the opcheck's own
        # backward of every output (torch 2.15 "Node getitem was invalid, but is output"); the compiled
        # forward and backward are tested end to end by test_compile_fullgraph instead.
        fused_tests = ("test_schema", "test_autograd_registration", "test_faketensor")
        _opcheck(torch.ops.xent.fused.default, (x, t, None, -100, red, 0.0, 0.0, 5.0, False), fused_tests)
        _opcheck(torch.ops.xent.fused.default, (x, t, w, 3, red, 0.2, 0.0, 0.0, True), fused_tests)
    _opcheck(torch.ops.xent.fused_inplace.default, (x.detach().clone(), t, None, -100, 2, 0.0, 0.0, 0.0, False))
    _opcheck(torch.ops.xent.rescale_.default, (x.detach().clone(), torch.tensor([2.0])))
    _opcheck(torch.ops.xent.shard_stats.default, (x.detach(), t, 20, 40, -100, 0.1, 0.0))
    st = torch.ops.xent.shard_stats(x.detach(), t, 0, 20, -100, 0.0, 0.0)
    _opcheck(torch.ops.xent.combine.default, (torch.stack([st, st]), t, 20, -100, 2, 0.0, 0.0, torch.float32))
    _opcheck(torch.ops.xent.shard_backward.default,
             (x.detach(), t, torch.randn(6), torch.tensor([1.5]), 0, 20, -100, 2, 0.0, 0.0, 0.0))
    lse = torch.logsumexp(x.detach(), 1)
    _opcheck(torch.ops.xent.backward.default, (x.detach(), t, w, lse, torch.tensor([1.5]), 3, 2, 0.1, 0.0, 0.0))
    _opcheck(torch.ops.xent.backward.default, (x.detach(), t, None, lse, torch.rand(6), -100, 0, 0.0, 1e-3, 5.0))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("opts", [{}, {"label_smoothing": 0.1}, {"ignore_index": 2}, {"weight": True},
                                  {"weight": True, "label_smoothing": 0.2}])
def test_emulated_matches_torch(emulate, reduction, opts):
    x, t = _x(n=9, c=7, grad=True, seed=3)
    t[1] = 2
    opts = dict(opts)
    if opts.get("weight"):
        opts["weight"] = torch.rand(7) + 0.5
    loss = xent.cross_entropy(x, t, reduction=reduction, **opts)
    ref = F.cross_entropy(x.double(), t, reduction=reduction,
                          **{k: (v.double() if k == "weight" else v) for k, v in opts.items()})
    torch.testing.assert_close(loss.double(), ref, rtol=1e-5, atol=1e-6)
    up = torch.rand(loss.shape, dtype=torch.float32) + 0.5
    (g,) = torch.autograd.grad(loss, x, up)
    xd = x.detach().double().requires_grad_(True)
    ref = F.cross_entropy(xd, t, reduction=reduction, **{k: (v.double() if k == "weight" else v)
                                                         for k, v in opts.items()})
    (gr,) = torch.autograd.grad(ref, xd, up.double())
    torch.testing.assert_close(g.double(), gr, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(7,), (3, 7, 4), (2, 7, 3, 5), (4, 7, 1)])
def test_layouts_as_torch(emulate, reduction, shape):
    """F.cross_entropy's other layouts: unbatched [C] with a 0-d target, and [N, C, d1, ...] with targets
    [N, d1, ...]; loss (its shape for none), lse and gradient against torch in float64."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(shape, generator=g).requires_grad_(True)
    tshape = () if len(shape) == 1 else (shape[0],) + shape[2:]
    t = torch.randint(0, 7, tshape, generator=g)
    if t.dim():
        t.view(-1)[0] = 2  # an ignored element
    w = torch.rand(7, generator=g) + 0.5
    opts = dict(weight=w, ignore_index=2, label_smoothing=0.1, reduction=reduction)
    loss, lse = xent.cross_entropy(x, t, return_lse=True, **opts)
    xd = x.detach().double().requires_grad_(True)
    ref = F.cross_entropy(xd, t, **dict(opts, weight=w.double()))
    assert loss.shape == ref.shape and lse.shape == tshape
    torch.testing.assert_close(loss.double(), ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lse.double(), torch.logsumexp(xd.detach(), dim=0 if len(shape) == 1 else 1))
    up = torch.rand(loss.shape, generator=g) + 0.5
    (gx,) = torch.autograd.grad(loss, x, up)
    (gr,) = torch.autograd.grad(ref, xd, up.double())
    torch.testing.assert_close(gx.double(), gr, rtol=1e-5, atol=1e-6)


def test_layouts_refuse_inplace_and_mismatched_targets():
    x, t = torch.randn(3, 7, 4), torch.zeros(3, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="inplace_backward takes"):
        xent.cross_entropy(x.to("meta"), t.to("meta"), inplace_backward=True)
    with pytest.raises(ValueError, match=r"target of shape \(3, 4\)"):
        xent.cross_entropy(x.to("meta"), t[:, :3].to("meta"))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("c", [5, 0])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_no_rows_as_torch(emulate, reduction, c, eps):
    """A batch of no rows: F.cross_entropy's NaN mean, 0 sum (NaN when smoothing divides by C = 0) and
    empty none, with a gradient of no elements."""
    x = torch.zeros(0, c, dtype=torch.bfloat16, requires_grad=True)
    t = torch.zeros(0, dtype=torch.long)
    loss, lse = xent.cross_entropy(x, t, reduction=reduction, label_smoothing=eps, return_lse=True)
    ref = F.cross_entropy(x.float(), t, reduction=reduction, label_smoothing=eps)
    assert loss.shape == ref.shape and loss.dtype == torch.float32 and lse.shape == (0,)
    torch.testing.assert_close(loss, ref, equal_nan=True)
    loss.sum().backward()
    assert x.grad.shape == (0, c)


def test_reference_z_loss_and_softcap_gradients():
    x, t = _x(n=5, c=6, seed=4)
    t[0] = -100
    for red in ("mean", "sum", "none"):
        xd = x.double().requires_grad_(True)
        loss, _ = _reference.loss_and_lse(xd, t, None, -100, red, 0.1, 1e-2, 3.0)
        d = torch.rand(loss.shape, dtype=torch.float64) + 0.5
        (ga,) = torch.autograd.grad(loss, xd, d)
        _, _, gc = _reference.fused(x, t, None, -100, red, 0.1, 1e-2, 3.0, d)
        torch.testing.assert_close(gc, ga)


def test_inplace_backward(emulate):
    x, t = _x(grad=True, seed=5)
    y = x * 1.0
    loss = xent.cross_entropy(y, t, inplace_backward=True)
    (loss * 3).backward()
    xd = x.detach().double().requires_grad_(True)
    (F.cross_entropy(xd, t) * 3).backward()
    torch.testing.assert_close(x.grad.double(), xd.grad, rtol=1e-5, atol=1e-7)
    assert y._version > 0  # y holds the gradient now


@pytest.mark.parametrize("reduction, opts, inplace", [
    ("mean", {}, False),
    ("mean", {}, True),
    ("sum", {}, False),
    ("none", {}, False),
    ("mean", {"weight": True, "label_smoothing": 0.1}, False),
    ("mean", {"ignore_index": 3}, False),
])
def test_f16_gradient_under_a_loss_scale(emulate, reduction, opts, inplace):
    """f16 logits under a loss scale (GradScaler's 2**16 for the mean): the gradient is rounded to f16 once,
    after the scale, as PyTorch rounds it. A gradient rounded at scale 1 and rescaled (the fused kernel's)
    would hold p_j / n, which f16 flushes to zero: here 1.1% of the elements of a mean over 512 rows of
    4000, 9.7% with weights and smoothing (80% at 4096 rows of 32000 on the GPU); a sum's smallest entries,
    held as f16 subnormals before the scale, would be up to 1.6% off."""
    n, c = 512, 4000
    scale = 2.0 ** 16 if reduction == "mean" else 2.0 ** 10  # a sum's gradient would overflow f16 at 2**16
    x, t = _x(n, c, torch.float16, grad=True, seed=11)
    w = torch.rand(c, generator=torch.Generator().manual_seed(3)) + 0.5 if opts.get("weight") else None
    kw = {k: v for k, v in opts.items() if k != "weight"}
    loss = xent.cross_entropy(x * 1.0 if inplace else x, t, w, reduction=reduction, inplace_backward=inplace, **kw)
    loss.backward(torch.full_like(loss, scale))
    xd = x.detach().double().requires_grad_(True)
    ref = F.cross_entropy(xd, t, w.double() if w is not None else None, reduction=reduction, **kw)
    ref.backward(torch.full_like(ref, scale))
    want = xd.grad.to(torch.float16)  # PyTorch's f16 gradient: the scaled float gradient, rounded once
    lost = ((x.grad == 0) & (want != 0)).sum().item()
    assert lost == 0, "%d of %d gradient elements flushed to zero" % (lost, want.numel())
    torch.testing.assert_close(x.grad.double(), want.double(), rtol=1e-3, atol=0)


def test_inplace_backward_refuses_overlapping_rows(emulate):
    """Rows that share memory (an expanded tensor) cannot each hold their own gradient: a clear error,
    before anything is written."""
    x, t = _x(grad=True, seed=5)
    rows = x[:1].expand(x.shape[0], -1)
    with pytest.raises(ValueError, match="rows share memory"):
        xent.cross_entropy(rows, t, inplace_backward=True)
    assert x._version == 0


@pytest.mark.parametrize("shape, strides, overlapping", [
    ((4, 8), (0, 1), True),    # an expanded row
    ((4, 8), (3, 1), True),    # rows 3 apart over 8 classes
    ((4, 8), (8, 1), False),
    ((4, 8), (11, 1), False),  # padded rows
    ((1, 8), (0, 1), False),   # one row shares with nothing
])
def test_rows_that_share_memory_never_reach_a_key(shape, strides, overlapping):
    """Rows that share memory are read from a copy of their own rows (_apart), and a plan's key refuses
    them rather than taking them for rows C apart."""
    x = torch.arange(64, dtype=torch.float32).as_strided(shape, strides)
    assert xent._ops._overlapping(x) == overlapping
    y = xent._ops._apart(x)
    assert torch.equal(y, x) and (y.data_ptr() != x.data_ptr()) == overlapping
    if overlapping:
        with pytest.raises(ValueError, match="share memory"):
            xent._ops._row_stride(x)
    assert xent._ops._row_stride(y) == (shape[1] if shape[0] == 1 else y.stride(0))


def test_inplace_backward_refuses_saved_logits(emulate):
    """A node that saved the logits for its own backward would read the gradient written over them:
    the logits' version counter makes that backward raise instead."""
    x, t = _x(grad=True, seed=5)
    y = x * 1.0
    aux = (y * y).sum()  # mul saves y
    loss = xent.cross_entropy(y, t, inplace_backward=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        (loss + aux).backward()


def test_no_grad_uses_forward(emulate):
    x, t = _x(grad=True)
    with torch.no_grad():
        loss, lse = xent.cross_entropy(x, t, return_lse=True)
    assert loss.grad_fn is None
    torch.testing.assert_close(lse.double(), torch.logsumexp(x.detach().double(), 1), rtol=1e-6, atol=1e-6)


def test_lse_not_differentiable(emulate):
    x, t = _x(grad=True)
    loss, lse = xent.cross_entropy(x, t, return_lse=True)
    assert not lse.requires_grad and loss.requires_grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("inplace", [False, True])
def test_compile_fullgraph(emulate, inplace, dtype):
    """Compiled whole (fullgraph): the fused op with its rescale, or for float16 the forward op and
    xent::backward, the same gradient as eager."""
    torch._dynamo.reset()
    x, t = _x(n=8, c=12, dtype=dtype, grad=True, seed=6)

    def f(x, t):
        return xent.cross_entropy(x * 2.0, t, z_loss=1e-3, label_smoothing=0.05, inplace_backward=inplace)

    cf = torch.compile(f, backend="aot_eager", fullgraph=True)
    xc = x.detach().clone().requires_grad_(True)
    cf(xc, t).backward()
    xe = x.detach().clone().requires_grad_(True)
    f(xe, t).backward()
    torch.testing.assert_close(xc.grad, xe.grad)


class _TinyLM(torch.nn.Module):
    def __init__(self, vocab=32, dim=16):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.head = torch.nn.Linear(dim, vocab)
        self.loss = xent.CrossEntropyLoss(label_smoothing=0.1)

    def forward(self, tokens, targets):
        h = torch.tanh(self.emb(tokens))
        return self.loss(self.head(h).view(-1, self.head.out_features), targets.view(-1))


def test_dynamo_explain_no_graph_break(emulate):
    torch._dynamo.reset()
    m = _TinyLM()
    tok = torch.randint(0, 32, (4, 8))
    ex = torch._dynamo.explain(m)(tok, tok)
    assert ex.graph_break_count == 0, ex.break_reasons
    assert ex.graph_count == 1


def test_module_repr_and_legacy_args():
    m = xent.CrossEntropyLoss(size_average=False, z_loss=1e-4)
    assert m.reduction == "sum" and "z_loss" in repr(m)


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_emulated_shards_match_unsharded(emulate, k, reduction):
    n, V = 7, 23
    x, t = _x(n=n, c=V, seed=7)
    t[3] = -100
    bounds = [V * i // k for i in range(k + 1)]
    kw = dict(ignore_index=-100, label_smoothing=0.1)
    stats = [xent.shard_stats(x[:, a:b], t, a, V, softcap=4.0, **kw) for a, b in zip(bounds, bounds[1:])]
    loss, lse = xent.combine(stats, t, V, reduction=reduction, z_loss=1e-3, **kw)
    ref, ref_lse = _reference.loss_and_lse(x, t, None, -100, reduction, 0.1, 1e-3, 4.0)
    torch.testing.assert_close(loss.double(), ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-5, atol=1e-6)
    d = torch.rand(loss.shape) + 0.5
    g = torch.cat([xent.shard_backward(x[:, a:b], t, lse, d, a, V, reduction=reduction, z_loss=1e-3, softcap=4.0,
                                       **kw) for a, b in zip(bounds, bounds[1:])], dim=1)
    _, _, gr = _reference.fused(x, t, None, -100, reduction, 0.1, 1e-3, 4.0, d)
    torch.testing.assert_close(g.double(), gr, rtol=1e-5, atol=1e-6)


def test_vocab_parallel_single_process(emulate):
    x, t = _x(n=5, c=9, grad=True, seed=8)
    loss = xent.vocab_parallel_cross_entropy(x, t, 0, 9)
    loss.backward()
    xd = x.detach().double().requires_grad_(True)
    F.cross_entropy(xd, t).backward()
    torch.testing.assert_close(x.grad.double(), xd.grad, rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="whole"):
        xent.vocab_parallel_cross_entropy(x[:, :4], t, 0, 9)
