#!/usr/bin/env python3
"""Cross-entropy over a vocabulary split across the ranks of a process group: a check and a benchmark.

    torchrun --nproc-per-node K bench/vocab_parallel.py [--check-only] [--out DIR]
             [--shapes 8192x128256:bf16,32768x256000:bf16] [--iters 10]
    python3 bench/vocab_parallel.py --cpu --nproc K --check-only     # Gloo on the CPU (no GPU)

Each rank holds the columns [V*r/K, V*(r+1)/K) of the logits (no rank holds a whole row) and the
same targets. xent.vocab_parallel_cross_entropy computes each shard's per-row partials (2 floats a
row), all-gathers them over the group, combines them into the loss and the global log-sum-exp, and
its backward gives each rank the gradient of its own columns.

Check: for every dtype and option of the shard API (reduction, ignore_index, label smoothing, z-loss,
soft-capping), every rank compares the loss and its gradient columns with the float64 reference of
the whole vocabulary (xent._reference) and the ranks' failures are summed; exit status 1 on any.
With --cpu the ranks use Gloo and xent's float64 CPU emulation: the collectives and the shard algebra
are checked, not the kernels.

Benchmark (CUDA, NCCL): time per step (forward and backward, back to back, CUDA events, median of 5
repeats of --iters steps, the slowest rank's) of xent and of PyTorch's own vocab-parallel formulation
(the shard's max all-reduced, its sum of exponentials all-reduced, the target's logit all-reduced,
as Megatron-LM computes it), eager and under torch.compile. Rank 0 prints a markdown table and writes
DIR/vocab_parallel.json.
"""

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "python")))
from _timing import back_to_back_us  # noqa: E402 (bench/, the script's own folder, is on sys.path)

DEFAULT_SHAPES = "8192x128256:bf16,32768x256000:bf16"
# (dtype, options) of the check; every case also runs each reduction
CHECK_CASES = [
    ("float32", {}),
    ("bfloat16", {}),
    ("float16", {}),
    ("float32", {"ignore_index": 3}),
    ("float32", {"label_smoothing": 0.1}),
    ("bfloat16", {"z_loss": 1e-3}),
    ("float32", {"softcap": 4.0}),
    ("bfloat16", {"label_smoothing": 0.05, "z_loss": 1e-4, "softcap": 8.0, "ignore_index": 5}),
]


def parse_shape(s):
    dims, _, dt = s.partition(":")
    n, c = (int(v) for v in dims.split("x"))
    return n, c, {"": "float32", "fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[dt]


def bounds(vocab, k):
    return [vocab * i // k for i in range(k + 1)]


def check(torch, dist, xent, device, n, vocab):
    """Every rank's loss and gradient columns against the unsharded float64 reference; the number of
    failures, summed over the ranks."""
    from xent import _reference
    rank, k = dist.get_rank(), dist.get_world_size()
    a, b = bounds(vocab, k)[rank:rank + 2]
    failures = 0
    for case, (dtype, opts) in enumerate(CHECK_CASES):
        for reduction in ("mean", "sum", "none"):
            g = torch.Generator().manual_seed(1000 + case)
            x = (torch.randn(n, vocab, generator=g, dtype=torch.float64) * 3).to(getattr(torch, dtype))
            t = torch.randint(0, vocab, (n,), generator=g)
            ii = opts.get("ignore_index", -100)
            if ii >= 0:
                t[::4] = ii  # a quarter of the rows ignored (ignore_index is a class index here)
            d = torch.rand(n if reduction == "none" else (), generator=g, dtype=torch.float64) + 0.5
            ls, z, cap = opts.get("label_smoothing", 0.0), opts.get("z_loss", 0.0), opts.get("softcap", 0.0)
            ref_loss, _, ref_grad = _reference.fused(x, t, None, ii, reduction, ls, z, cap, d)
            shard = x[:, a:b].contiguous().to(device).requires_grad_(True)
            loss = xent.vocab_parallel_cross_entropy(shard, t.to(device), a, vocab, dist.group.WORLD,
                                                     ignore_index=ii, reduction=reduction, label_smoothing=ls,
                                                     z_loss=z, softcap=cap)
            loss.backward(d.float().to(device))
            tol = 1e-5 if dtype == "float32" else 1e-2  # 16-bit: the gradient is rounded to its dtype
            try:
                torch.testing.assert_close(loss.double().cpu(), ref_loss, rtol=1e-5, atol=1e-6)
                torch.testing.assert_close(shard.grad.double().cpu(), ref_grad[:, a:b], rtol=tol, atol=tol * 1e-2)
            except AssertionError as e:
                failures += 1
                print("rank %d: %s %s %s: %s" % (rank, dtype, opts, reduction, str(e).splitlines()[0]), flush=True)
    # PyTorch's formulation, which the benchmark times beside xent (mean, no options)
    g = torch.Generator().manual_seed(999)
    x = torch.randn(n, vocab, generator=g, dtype=torch.float64) * 3
    t = torch.randint(0, vocab, (n,), generator=g)
    ref_loss, _, ref_grad = _reference.fused(x, t, None, -100, "mean", 0.0, 0.0, 0.0)
    shard = x[:, a:b].float().to(device).requires_grad_(True)
    loss = torch_vocab_parallel(torch, dist)(shard, t.to(device), a)
    loss.backward()
    try:
        torch.testing.assert_close(loss.double().cpu(), ref_loss, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(shard.grad.double().cpu(), ref_grad[:, a:b], rtol=1e-5, atol=1e-7)
    except AssertionError as e:
        failures += 1
        print("rank %d: torch's formulation: %s" % (rank, str(e).splitlines()[0]), flush=True)
    count = torch.tensor([failures], dtype=torch.int64, device=device)
    dist.all_reduce(count)
    return int(count.item())


def torch_vocab_parallel(torch, dist):
    """PyTorch's vocab-parallel cross-entropy (mean), the Megatron-LM way: an autograd Function whose
    forward all-reduces the shard's row max, its sum of exponentials and the target's logit, and whose
    backward is softmax minus one-hot on the shard, in float32."""

    class VocabParallelCE(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logits, target, offset):
            x = logits.float()
            m = x.max(dim=1).values
            dist.all_reduce(m, op=dist.ReduceOp.MAX)
            x = x - m[:, None]
            e = x.exp()
            s = e.sum(dim=1)
            dist.all_reduce(s)
            local = target - offset
            inside = (local >= 0) & (local < x.shape[1])
            tl = torch.where(inside, x.gather(1, local.clamp(0, x.shape[1] - 1)[:, None])[:, 0], 0.0)
            dist.all_reduce(tl)
            e.div_(s[:, None])
            ctx.save_for_backward(e, local, inside)
            ctx.dtype = logits.dtype
            return (s.log() - tl).mean()

        @staticmethod
        def backward(ctx, grad):
            p, local, inside = ctx.saved_tensors
            rows = torch.arange(p.shape[0], device=p.device)[inside]
            p[rows, local[inside]] -= 1.0
            return (p * (grad / p.shape[0])).to(ctx.dtype), None, None

    return VocabParallelCE.apply


def bench(torch, dist, xent, device, n, vocab, dtype, iters):
    rank, k = dist.get_rank(), dist.get_world_size()
    a, b = bounds(vocab, k)[rank:rank + 2]
    g = torch.Generator(device=device).manual_seed(7)
    base = torch.randn(n, b - a, device=device, generator=g).to(getattr(torch, dtype))
    t = torch.randint(0, vocab, (n,), device=device, generator=torch.Generator(device=device).manual_seed(8))
    tvp = torch_vocab_parallel(torch, dist)
    fns = {
        "xent": lambda x: xent.vocab_parallel_cross_entropy(x, t, a, vocab, dist.group.WORLD),
        "torch eager": lambda x: tvp(x, t, a),
        "torch.compile": torch.compile(lambda x: tvp(x, t, a)),
    }
    if k == 1:  # one rank holds the whole vocabulary: no collective, xent's fused loss
        fns["xent"] = lambda x: xent.cross_entropy(x, t)
    out = {}
    ref = None
    for name, fn in fns.items():
        x = base.clone().requires_grad_(True)

        def step():
            fn(x).backward()
            x.grad = None

        def together():  # every rank starts a round at once
            dist.barrier()
            torch.cuda.synchronize()

        try:  # an error (PyTorch's float32 copies of a large shard run out of memory) is the row's cell
            loss = fn(x).item()  # every implementation's loss agrees with the first's before it is timed
            ref = loss if ref is None else ref
            if abs(loss - ref) > 1e-3 * abs(ref):
                out[name] = "loss %.6g, xent's %.6g" % (loss, ref)
                continue
            for _ in range(3):
                step()
            us = torch.tensor([back_to_back_us(torch, step, iters, before_round=together)], device=device)
            dist.all_reduce(us, op=dist.ReduceOp.MAX)  # the step ends when the slowest rank's does
            out[name] = us.item()
        except Exception as ex:  # noqa: BLE001 - reported in the table, the other rows still run
            out[name] = "error: %s: %s" % (type(ex).__name__, str(ex).splitlines()[0][:160] if str(ex) else "")
        finally:
            del x
            torch.cuda.empty_cache()  # the next implementation starts with the memory this one held
    return out


def run(rank, world, args, store_path=None):
    import torch
    import torch.distributed as dist
    import xent
    if args.cpu:
        xent._ops.set_cpu_emulation(True)
        dist.init_process_group("gloo", init_method="file://" + store_path, rank=rank, world_size=world)
        device = torch.device("cpu")
    else:
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        device = torch.device("cuda", local)
    rank, k = dist.get_rank(), dist.get_world_size()
    n, vocab = (24, 301) if args.cpu else (64, 50257)
    failures = check(torch, dist, xent, device, n, vocab)
    if rank == 0:
        print("check: %d ranks, %d cases x 3 reductions, vocabulary %d: %s" % (
            k, len(CHECK_CASES), vocab, "all match the unsharded float64 reference" if failures == 0
            else "%d failures" % failures), flush=True)
    results = []
    if rank == 0 and not args.check_only and not args.cpu:
        print("\n| shape | GPUs | xent | torch eager | torch.compile |\n| --- | ---: | ---: | ---: | ---: |", flush=True)
    if not args.check_only and failures == 0 and not args.cpu:
        for s in args.shapes.split(","):
            n, vocab, dtype = parse_shape(s)
            r = bench(torch, dist, xent, device, n, vocab, dtype, args.iters)
            results.append({"shape": "%dx%d" % (n, vocab), "dtype": dtype, "gpus": k, "us": r})
            if rank == 0:
                cells = " | ".join(("%.1f µs" % v) if isinstance(v, float) else v for v in r.values())
                print("| %dx%d %s | %d | %s |" % (n, vocab, dtype, k, cells), flush=True)
    if rank == 0 and args.out and results:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "vocab_parallel.json"), "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "results": results}, f,
                      indent=1)
    dist.barrier()  # no rank leaves while another still talks to it
    dist.destroy_process_group()
    # out without the interpreter's teardown: there a Gloo rank can abort ("terminate called without
    # an active exception", SIGABRT) after its results are in, about one run in six of 2 CPU ranks
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1 if failures else 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu", action="store_true", help="Gloo ranks on the CPU, xent's float64 emulation")
    ap.add_argument("--nproc", type=int, default=2, help="with --cpu: how many ranks to spawn")
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.cpu and "RANK" not in os.environ:
        import torch.multiprocessing as mp
        store = os.path.join(tempfile.mkdtemp(prefix="xent-vp."), "store")
        mp.spawn(run, args=(args.nproc, args, store), nprocs=args.nproc)
    else:
        run(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), args)


if __name__ == "__main__":
    main()
