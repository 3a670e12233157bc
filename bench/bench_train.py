#!/usr/bin/env python3
"""Forward + backward of the cross-entropy loss: xent vs torch eager, torch.compile, Liger and Quack, on one GPU.

    python3 bench/bench_train.py --out DIR [--shapes 32768x4096,32768x4096:bf16,16384x50257,8192x128256:bf16]
                                 [--impls floor,xent,xent-inplace,eager,compile,liger,quack] [--iters 20] [--scale K]

Each call computes loss = cross_entropy(logits, targets) (mean) and its gradient with respect to the
logits (loss.backward() with logits a leaf that requires grad; with --scale K, (loss * K).backward(),
the backward of a scaled loss: a GradScaler's, or an accumulated step's loss / steps). Timing: CUDA
events around `iters` calls back to back after a warm-up, median of 5 repeats, per call. "floor" is a
copy of the logits into a same-size buffer (torch's copy_: reads the logits once and writes a
gradient-sized tensor), the least memory traffic any fused forward+backward can have, measured in the
same run. Every implementation's loss and gradient are first checked against float64 PyTorch. Liger
(in place) and Quack (`quack.cross_entropy.cross_entropy`, its forward and backward kernels, the gradient
to a new buffer) run where importable and are reported as skipped otherwise. Writes
DIR/bench_train.json and DIR/bench_train.md.
"""

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "python")))
from _timing import back_to_back_us  # noqa: E402 (bench/, the script's own folder, is on sys.path)

DEFAULT_SHAPES = "32768x4096,32768x4096:bf16,16384x50257,8192x128256:bf16"


def parse_shape(s):
    dims, _, dt = s.partition(":")
    n, c = (int(v) for v in dims.split("x"))
    return n, c, dt or "fp32"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--impls", default="floor,xent,xent-inplace,eager,compile,liger,quack")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--scale", type=float, default=1.0, help="backward of loss * K (default 1: loss)")
    args = ap.parse_args()
    scale = args.scale
    import torch
    import torch.nn.functional as F
    import xent
    os.makedirs(args.out, exist_ok=True)
    dts = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

    def impl_fns():
        fns = {
            "xent": lambda x, t: xent.cross_entropy(x, t),
            "xent-inplace": lambda x, t: xent.cross_entropy(x, t, inplace_backward=True),
            "eager": lambda x, t: F.cross_entropy(x, t),
        }
        torch._dynamo.config.cache_size_limit = 64
        fns["compile"] = torch.compile(lambda x, t: F.cross_entropy(x, t), dynamic=False)
        try:
            from liger_kernel.transformers.functional import liger_cross_entropy
            fns["liger"] = lambda x, t: liger_cross_entropy(x, t)
        except Exception as e:  # noqa: BLE001
            print("liger: not importable (%s)" % e, flush=True)
        try:
            from quack.cross_entropy import cross_entropy as quack_cross_entropy
            fns["quack"] = lambda x, t: quack_cross_entropy(x, t, reduction="mean")
        except Exception as e:  # noqa: BLE001
            print("quack: not importable (%s)" % e, flush=True)
        return fns

    fns = impl_fns()
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "iters": args.iters, "scale": scale,
               "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "shapes": []}
    for spec in args.shapes.split(","):
        n, c, dtn = parse_shape(spec)
        dt = dts[dtn]
        g = torch.Generator(device="cuda").manual_seed(0)
        base = torch.randn(n, c, device="cuda", generator=g).to(dt)
        t = torch.randint(0, c, (n,), device="cuda", generator=g)
        row = {"shape": "%dx%d %s" % (n, c, dtn), "n": n, "c": c, "dtype": dtn, "bytes_read_write": 2 * base.numel()
               * base.element_size(), "impls": {}}
        # reference on a slice of rows (float64 of the whole problem may not fit)
        rows = min(n, 256)
        xd = base[:rows].double().requires_grad_(True)
        ref = F.cross_entropy(xd, t[:rows], reduction="sum") / n
        (ref * scale).backward()
        for name in args.impls.split(","):
            rec = {}
            row["impls"][name] = rec
            try:
                if name == "floor":
                    dst = torch.empty_like(base)

                    def call():
                        dst.copy_(base)
                else:
                    if name not in fns:
                        rec["status"] = "skipped (not importable)"
                        continue
                    fn = fns[name]
                    inplace = name in ("xent-inplace", "liger")
                    x = base.clone().requires_grad_(True)
                    # correctness (float64 reference on the first rows)
                    loss = fn(x, t)
                    (loss * scale if scale != 1.0 else loss).backward()
                    torch.cuda.synchronize()
                    gerr = (x.grad[:rows].double() - xd.grad).abs().max().item() / xd.grad.abs().max().item()
                    ref_full = F.cross_entropy(base.float(), t).item()
                    rec["loss_rel_err"] = abs(loss.item() - ref_full) / abs(ref_full)
                    rec["grad_rel_err_first_rows"] = gerr
                    # a leaf of its own: base itself must never start requiring grad
                    work = base.clone() if inplace else base.detach().clone().requires_grad_(True)

                    def call(fn=fn, work=work, inplace=inplace):
                        xx = work if not inplace else work.detach().requires_grad_(True)
                        # the in-place ones overwrite work with the gradient: timing them on that buffer is
                        # the same memory traffic (the values do not change the cost)
                        loss = fn(xx, t)
                        (loss * scale if scale != 1.0 else loss).backward()
                        xx.grad = None
                for _ in range(3):
                    call()
                torch.cuda.synchronize()
                rec["us"] = back_to_back_us(torch, call, args.iters)
                # the host's own time a call (Python, autograd, launches): the calls are queued behind a
                # long GPU sleep, so the host never waits on the GPU while they are issued; five rounds,
                # their median and range, since one round's figure swings with what else the host does
                host = []
                for _ in range(5):
                    torch.cuda._sleep(int(2e8))  # ~0.1 s of GPU time ahead of the calls
                    h0 = time.perf_counter()
                    for _ in range(args.iters):
                        call()
                    host.append((time.perf_counter() - h0) * 1e6 / args.iters)
                    torch.cuda.synchronize()
                rec["host_us"] = statistics.median(host)
                rec["host_us_range"] = [min(host), max(host)]
                rec["status"] = "ok"
            except Exception as ex:  # noqa: BLE001
                rec["status"] = "error: %s: %s" % (type(ex).__name__, str(ex).splitlines()[0][:200] if str(ex) else "")
            print("%-22s %-13s %s" % (row["shape"], name, ("%.1f us (host %.1f us, %.1f-%.1f)" % ((rec["us"], rec["host_us"]) + tuple(rec["host_us_range"])))
                                      if "us" in rec else rec["status"]),
                  flush=True)
        results["shapes"].append(row)
        del base
        torch.cuda.empty_cache()
    names = args.impls.split(",")
    lines = ["| shape | " + " | ".join(names) + " |", "| --- |" + " ---: |" * len(names)]
    for row in results["shapes"]:
        floor = row["impls"].get("floor", {}).get("us")
        cells = []
        for nm in names:
            r = row["impls"].get(nm, {})
            if "us" in r:
                cells.append("%.1f µs%s" % (r["us"], " (%.2f×)" % (r["us"] / floor) if floor and nm != "floor" else ""))
            else:
                cells.append(r.get("status", "-"))
        lines.append("| %s | %s |" % (row["shape"], " | ".join(cells)))
    what = "forward+backward" if scale == 1.0 else "forward+backward of loss * %g" % scale
    md = "%s per call, back to back (%s, torch %s, %s); × = over the copy floor\n\n" % (
        what, results["device"], results["torch"], results["date"]) + "\n".join(lines) + "\n"
    open(os.path.join(args.out, "bench_train.md"), "w").write(md)
    json.dump(results, open(os.path.join(args.out, "bench_train.json"), "w"), indent=1)
    print(md)


if __name__ == "__main__":
    main()
