#!/usr/bin/env python3
"""Cross-check xent against PyTorch's F.cross_entropy on the GPU machine.

    python3 tests/gpu/torch_crosscheck.py [--seed S] [--cases N] [--json FILE] [-v]

Loads build/libxent.so (or $XENT_LIB) through python/xent/_capi.py and, on
random cases (n in [1, 5000], c in [1, 70000], biased to small and odd values;
fp32/fp16/bf16 logits; int32/int64 targets; none/sum/mean; ignore_index with
some or all rows ignored; label smoothing; class weights; rows strided and
offset by slicing a wider tensor), compares xent with the reference

    F.cross_entropy(logits.double(), targets.long(), weight=w.double(), ...)

i.e. PyTorch in float64 on the same (upcast) inputs. It also reports torch's
own same-dtype result's error against that reference, for scale.

Error measure: err = ||x - r|| / max(||r||, floor), the vector 2-norm for
'none' and the absolute value for 'sum'/'mean'. The floor is 1% of the same
norm of the rows' float64 log-sum-exp (times the largest weight): a loss is
lse - x_target, so when it is far smaller than the lse it comes from, float32
cannot resolve it better than ~ulp(lse) and the relative error is meaningless.
A case passes when err <= --tol (1e-5). NaN passes only where the reference is
NaN (mean over rows that are all ignored or have zero total weight). Outputs
are poisoned with NaN before each call; 'sum' and 'mean' are run twice and
must be bitwise equal (determinism); the per-row lse, when requested, is
checked on the non-ignored rows with the same tolerance.

Then fixed cases (the reference 32768x4096 fp32 torch.rand case, n=1, c=1,
c=2, 64x262144, 1048576x10, unaligned bf16 rows) and bad targets: a target
outside [0, c) that is not ignore_index must give NaN (that row for 'none', the
result for 'sum'/'mean'), xent_check_targets must then report
XENT_EBADTARGET once and XENT_OK after, and xent and torch must still work.

Prints `torch crosscheck: N cases, M failed, max rel err X` last and exits
non-zero on any failure.
"""

import argparse
import json
import math
import os
import random
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "..", "python")))  # the package's binding

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from xent import _capi as xent_ctypes  # noqa: E402
from xent._capi import Xent, XentError, XENT_OK, XENT_EBADTARGET  # noqa: E402

DEV = "cuda"  # the device of every tensor made here
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
SPECIAL_C = [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 127, 128, 129, 255, 257, 1000,
             1023, 1025, 4095, 4096, 4097, 8191, 32000, 32768, 50257, 65535, 65536, 69999, 70000]


def log_uniform(rng, lo, hi):
    return max(lo, min(hi, int(round(math.exp(rng.uniform(math.log(lo), math.log(hi + 1)))))))


def random_case(rng, idx):
    r = rng.random()
    if r < 0.25:
        n = rng.randint(1, 8)
    elif r < 0.45:
        n = rng.randrange(1, 5001, 2)
    else:
        n = log_uniform(rng, 1, 5000)
    r = rng.random()
    if r < 0.2:
        c = rng.randint(1, 16)
    elif r < 0.4:
        c = rng.choice(SPECIAL_C)
    elif r < 0.6:
        c = rng.randrange(1, 70001, 2)
    else:
        c = log_uniform(rng, 1, 70000)
    while n * c > 200_000_000:  # keep one case's float64 copies to a few GB
        n = max(1, n // 2)
    case = {
        "idx": idx, "n": n, "c": c,
        "dtype": rng.choice(list(DTYPES)),
        "tdtype": rng.choice(["i32", "i64"]),
        "reduction": rng.choice(["none", "sum", "mean"]),
        "ignore_index": -100, "ignore_frac": 0.0,
        "label_smoothing": 0.0, "weights": None,
        "pad": 0, "offset": 0,
        "dist": rng.choice(["randn", "randn", "rand"]),
        "scale": rng.choice([0.5, 1.0, 3.0, 10.0]),
        "lse": rng.random() < 0.2,
    }
    if rng.random() < 0.35:
        case["ignore_index"] = rng.choice([-100, -1, rng.randrange(c)])
        case["ignore_frac"] = 1.0 if rng.random() < 0.12 else rng.choice([0.05, 0.3, 0.7])
    if rng.random() < 0.3:
        case["label_smoothing"] = rng.choice([0.1, 1.0, round(rng.random(), 4)])
    if rng.random() < 0.3:
        case["weights"] = rng.choice(["uniform", "with_zeros"])
    if rng.random() < 0.3:
        case["pad"] = rng.randint(1, 67)
        case["offset"] = rng.randint(0, case["pad"])
    return case


def make_inputs(case, gen):
    """Build logits (maybe a strided slice), targets and weights on the GPU."""
    n, c = case["n"], case["c"]
    dt = DTYPES[case["dtype"]]
    width = c + case["pad"]
    if case["dist"] == "rand":
        base = torch.rand(n, width, generator=gen, device=DEV, dtype=torch.float32)
    else:
        base = torch.randn(n, width, generator=gen, device=DEV, dtype=torch.float32) * case["scale"]
    base = base.to(dt)
    logits = base[:, case["offset"]:case["offset"] + c]
    tdt = torch.int64 if case["tdtype"] == "i64" else torch.int32
    targets = torch.randint(0, c, (n,), generator=gen, device=DEV, dtype=torch.int64)
    if case["ignore_frac"] > 0:
        if case["ignore_frac"] >= 1.0:
            targets.fill_(case["ignore_index"])
        else:
            mask = torch.rand(n, generator=gen, device=DEV) < case["ignore_frac"]
            targets[mask] = case["ignore_index"]
    targets = targets.to(tdt)
    weights = None
    if case["weights"]:
        weights = torch.rand(c, generator=gen, device=DEV, dtype=torch.float32) * 2.95 + 0.05
        if case["weights"] == "with_zeros":
            weights[torch.rand(c, generator=gen, device=DEV) < 0.3] = 0.0
    return logits, targets, weights


def rel_err(x, r, floor):
    """||x - r|| / max(||r||, floor) in float64; NaN only where the reference is NaN."""
    x = x.detach().double().reshape(-1)
    r = r.detach().double().reshape(-1)
    xn, rn = torch.isnan(x), torch.isnan(r)
    if not bool(torch.equal(xn, rn)):
        return math.inf
    keep = ~rn
    x, r = x[keep], r[keep]
    if x.numel() == 0:
        return 0.0
    if bool(torch.isinf(x).any()) or bool(torch.isinf(r).any()):
        return 0.0 if bool(torch.equal(x, r)) else math.inf
    num = float(torch.linalg.vector_norm(x - r))
    den = max(float(torch.linalg.vector_norm(r)), floor)
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / den


def lse_floor(logits64, targets, case, w64):
    """1% of the norm of the non-ignored rows' lse, matching the reduction (see the doc)."""
    lse = torch.logsumexp(logits64, dim=1).abs()
    valid = targets.long() != case["ignore_index"]
    lse = torch.where(valid, lse, torch.zeros_like(lse))
    wmax = float(w64.abs().max()) if w64 is not None else 1.0
    red = case["reduction"]
    if red == "none":
        s = float(torch.linalg.vector_norm(lse))
    elif red == "sum":
        s = float(lse.sum())
    else:
        cnt = int(valid.sum())
        s = float(lse.sum()) / cnt if cnt else 0.0
    return 0.01 * wmax * s


def bits_equal(a, b):
    return bool(torch.equal(a.reshape(-1).view(torch.int32), b.reshape(-1).view(torch.int32)))


def poisoned(case, n):
    shape = (n,) if case["reduction"] == "none" else ()
    return torch.full(shape, float("nan"), dtype=torch.float32, device=DEV)


def run_case(xe, case, gen, tol):
    """Returns a result dict: err, torch_err, ok, notes."""
    logits, targets, weights = make_inputs(case, gen)
    n = case["n"]
    red, ii, ls = case["reduction"], case["ignore_index"], case["label_smoothing"]
    l64 = logits.double()
    w64 = weights.double() if weights is not None else None
    ref = F.cross_entropy(l64, targets.long(), weight=w64, ignore_index=ii, reduction=red, label_smoothing=ls)
    floor = lse_floor(l64, targets, case, w64)
    res = {"ok": True, "notes": []}

    out = poisoned(case, n)
    got = xe.forward(logits, targets, weights=weights, reduction=red, ignore_index=ii,
                     label_smoothing=ls, lse=case["lse"], out=out)
    if case["lse"]:
        got, lse_out = got
    torch.cuda.synchronize()
    err = rel_err(got, ref, floor)
    res["err"] = err
    res["ref"] = float(ref) if ref.dim() == 0 else float(torch.linalg.vector_norm(ref))
    res["got"] = float(got) if got.dim() == 0 else float(torch.linalg.vector_norm(got.double()))
    if not err <= tol:
        res["ok"] = False
        res["notes"].append("loss err %.3g > tol" % err)

    if case["lse"]:
        valid = targets.long() != ii
        lse_ref = torch.logsumexp(l64, dim=1)
        if bool(valid.any()):
            e2 = rel_err(lse_out[valid], lse_ref[valid], 0.0)
            res["lse_err"] = e2
            if not e2 <= tol:
                res["ok"] = False
                res["notes"].append("lse err %.3g > tol" % e2)

    if red != "none":
        out2 = poisoned(case, n)
        got2 = xe.forward(logits, targets, weights=weights, reduction=red, ignore_index=ii,
                          label_smoothing=ls, lse=case["lse"], out=out2)
        if case["lse"]:
            got2 = got2[0]
        torch.cuda.synchronize()
        if not bits_equal(got, got2):
            res["ok"] = False
            res["notes"].append("not deterministic: %r vs %r" % (float(got), float(got2)))

    rc = xe.check_targets()
    if rc != XENT_OK:
        res["ok"] = False
        res["notes"].append("check_targets returned %d on valid targets" % rc)

    # torch's own result in the input dtype, for scale (not judged)
    try:
        wt = weights.to(logits.dtype) if weights is not None else None
        tr = F.cross_entropy(logits, targets.long(), weight=wt, ignore_index=ii, reduction=red, label_smoothing=ls)
        res["torch_err"] = rel_err(tr.float(), ref, floor)
    except Exception as e:  # noqa: BLE001 - informative only
        res["torch_err"] = None
        res["notes"].append("torch same-dtype failed: %s" % str(e).splitlines()[0][:80])
    del logits, targets, weights, l64, w64, ref
    return res


def describe(case):
    s = "%dx%d %s %s %s" % (case["n"], case["c"], case["dtype"], case["tdtype"], case["reduction"])
    if case["ignore_frac"]:
        s += " ignore=%d(%.2f)" % (case["ignore_index"], case["ignore_frac"])
    if case["label_smoothing"]:
        s += " ls=%g" % case["label_smoothing"]
    if case["weights"]:
        s += " w=%s" % case["weights"]
    if case["pad"]:
        s += " stride=%d+%d" % (case["c"] + case["pad"], case["offset"])
    if case["lse"]:
        s += " lse"
    s += " %s*%g" % (case["dist"], case["scale"]) if case["dist"] == "randn" else " rand"
    return s


def fixed_cases():
    base = {"tdtype": "i64", "reduction": "mean", "ignore_index": -100, "ignore_frac": 0.0,
            "label_smoothing": 0.0, "weights": None, "pad": 0, "offset": 0, "dist": "randn",
            "scale": 1.0, "lse": False}
    out = []

    def add(name, **kw):
        c = dict(base)
        c.update(kw)
        c["name"] = name
        out.append(c)

    add("reference 32768x4096 fp32 rand mean", n=32768, c=4096, dtype="f32", dist="rand")
    add("reference 32768x4096 fp32 rand none", n=32768, c=4096, dtype="f32", dist="rand", reduction="none")
    add("n=1 c=1", n=1, c=1, dtype="f32")
    add("n=1 c=2 sum", n=1, c=2, dtype="f32", reduction="sum")
    add("n=3 c=1 none ls", n=3, c=1, dtype="bf16", reduction="none", label_smoothing=0.3)
    add("64x262144 fp32", n=64, c=262144, dtype="f32")
    add("64x262144 bf16 sum w", n=64, c=262144, dtype="bf16", reduction="sum", weights="uniform")
    add("1048576x10 fp32", n=1048576, c=10, dtype="f32")
    add("1048576x10 f16 none i32", n=1048576, c=10, dtype="f16", tdtype="i32", reduction="none")
    add("1024x50257 bf16 row offset 1", n=1024, c=50257, dtype="bf16", pad=3, offset=1)
    add("777x50257 fp32 row offset 3 ls w", n=777, c=50257, dtype="f32", pad=5, offset=3,
        label_smoothing=0.1, weights="with_zeros")
    add("all ignored mean -> NaN", n=100, c=33, dtype="f32", ignore_index=-100, ignore_frac=1.0)
    add("all ignored sum -> 0", n=100, c=33, dtype="f16", ignore_index=5, ignore_frac=1.0, reduction="sum")
    return out


def bad_target_checks(xe, gen, log):
    """Returns a list of (name, ok, note)."""
    results = []

    def rec(name, ok, note=""):
        results.append((name, bool(ok), note))
        if not ok or log:
            print("  bad-targets %-46s %s %s" % (name, "ok" if ok else "FAIL", note), flush=True)

    # drain any earlier flag
    xe.check_targets()
    for tdt, red, wts in [(torch.int64, "mean", False), (torch.int32, "none", False),
                          (torch.int64, "sum", True), (torch.int32, "mean", True)]:
        n, c = 4099, 1000
        name = "%s %s%s" % (str(tdt).replace("torch.", ""), red, " weights" if wts else "")
        logits = torch.randn(n, c, generator=gen, device=DEV)
        t = torch.randint(0, c, (n,), generator=gen, device=DEV, dtype=torch.int64)
        bad_rows = [0, 17, 1000, n - 1]
        bad_vals = [c, -7, 2**31 - 1 if tdt == torch.int32 else 2**40, -(2**31) if tdt == torch.int32 else -(2**62)]
        for r, v in zip(bad_rows, bad_vals):
            t[r] = v
        t = t.to(tdt)
        w = torch.rand(c, generator=gen, device=DEV) + 0.5 if wts else None
        out = torch.full((n,) if red == "none" else (), float("nan"), device=DEV)
        if red != "none":
            out.fill_(0.0)  # poison with a non-NaN: the result must become NaN
        try:
            got = xe.forward(logits, t, weights=w, reduction=red, out=out)
            torch.cuda.synchronize()
        except XentError as e:
            rec(name + " launch", False, str(e))
            continue
        if red == "none":
            badmask = torch.zeros(n, dtype=torch.bool, device=DEV)
            badmask[bad_rows] = True
            good = ~badmask
            tl = t.long().clone()
            tl[badmask] = -100
            ref = F.cross_entropy(logits.double(), tl, weight=w.double() if w is not None else None,
                                  reduction="none")
            nan_ok = bool(torch.isnan(got[badmask]).all())
            e = rel_err(got[good], ref[good], 0.0)
            rec(name + " bad rows NaN, others right", nan_ok and e <= 1e-5, "err %.3g" % e)
        else:
            rec(name + " result NaN", bool(torch.isnan(got)), "got %r" % float(got))
        try:
            rc = xe.check_targets()
        except XentError as e:
            rc = e.rc
        rec(name + " check_targets -> EBADTARGET", rc == XENT_EBADTARGET, "rc %d" % rc)
        rc2 = xe.check_targets()
        rec(name + " flag cleared -> OK", rc2 == XENT_OK, "rc %d" % rc2)

    # the context and torch still work afterwards
    try:
        logits = torch.randn(513, 4097, generator=gen, device=DEV)
        t = torch.randint(0, 4097, (513,), generator=gen, device=DEV)
        got = xe.forward(logits, t)
        ref = F.cross_entropy(logits.double(), t)
        torch.cuda.synchronize()
        e = rel_err(got, ref, 0.0)
        rec("good call after bad targets", e <= 1e-5 and xe.check_targets() == XENT_OK, "err %.3g" % e)
        s = float((torch.ones(1000, device=DEV) * 2).sum())
        rec("torch works after bad targets", s == 2000.0)
    except Exception as e:  # noqa: BLE001
        rec("context alive after bad targets", False, "%s: %s" % (type(e).__name__, e))
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--cases", type=int, default=240, help="random cases (>= 200 for the issue)")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--json", help="write every case and result to this file")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per case")
    args = ap.parse_args()

    if not torch.cuda.is_available():
        print("torch crosscheck: no CUDA device visible to torch")
        print("torch crosscheck: 0 cases, 1 failed, max rel err nan")
        return 2
    print("torch crosscheck: seed %d, %d random cases, tol %.1e, torch %s, %s, lib %s"
          % (args.seed, args.cases, args.tol, torch.__version__, torch.cuda.get_device_name(),
             xent_ctypes.default_library_path()), flush=True)
    t0 = time.time()
    # the shipped tune caches of this checkout, so their configurations are checked too
    os.environ.setdefault("XENT_DATADIR", os.path.normpath(os.path.join(HERE, "..", "..", "tunecache")))
    print("XENT_DATADIR=%s" % os.environ["XENT_DATADIR"], flush=True)
    xe = Xent()
    print("device:", xe.device_info(), flush=True)

    rng = random.Random(args.seed)
    gen = torch.Generator(device=DEV)
    gen.manual_seed(args.seed)
    cases = [random_case(rng, i) for i in range(args.cases)]
    for c in cases:
        c["name"] = describe(c)
    fixed = fixed_cases()
    for i, c in enumerate(fixed):
        c["idx"] = len(cases) + i
    all_cases = cases + fixed

    records = []
    failed = 0
    max_err = 0.0
    max_torch = 0.0
    for i, case in enumerate(all_cases):
        try:
            r = run_case(xe, case, gen, args.tol)
        except Exception as e:  # noqa: BLE001 - a crash is a failure of this case
            r = {"ok": False, "err": math.inf, "notes": ["%s: %s" % (type(e).__name__, e)]}
            traceback.print_exc()
            try:
                xe.check_targets()
            except Exception:  # noqa: BLE001
                pass
        r["case"] = case
        records.append(r)
        if r["err"] == r["err"]:
            max_err = max(max_err, r["err"])
        if r.get("torch_err") is not None and r["torch_err"] != math.inf:
            max_torch = max(max_torch, r["torch_err"])
        if not r["ok"]:
            failed += 1
        if args.verbose or not r["ok"] or case["idx"] >= len(cases):
            print("  %-4d %-62s err %-9.2e torch %-9s %s %s"
                  % (case["idx"], case["name"][:62], r["err"],
                     "%.2e" % r["torch_err"] if r.get("torch_err") is not None else "-",
                     "ok" if r["ok"] else "FAIL", "; ".join(r["notes"])), flush=True)
        elif (i + 1) % 40 == 0:
            print("  ... %d/%d cases, %d failed, max err %.2e (%.0f s)"
                  % (i + 1, len(all_cases), failed, max_err, time.time() - t0), flush=True)

    # the plan API (what bench/bench.py times): plan + launcher must equal forward bit for bit
    try:
        lg = torch.rand(32768, 4096, generator=gen, device=DEV)
        tg = torch.randint(0, 4096, (32768,), generator=gen, device=DEV)
        p = xe.plan(lg, tg)
        print("plan for 32768x4096 fp32 mean: source %s, workspace %d B, config %s"
              % (p.source_name, p.workspace_size, p.describe()), flush=True)
        out = torch.full((), float("nan"), device=DEV)
        go = p.launcher(lg, tg, out)
        go()
        go()
        fw = xe.forward(lg, tg)
        torch.cuda.synchronize()
        e = rel_err(out, F.cross_entropy(lg.double(), tg), 0.0)
        ok = bits_equal(out, fw) and e <= args.tol
        print("  plan.launcher vs forward: %s (%r vs %r, err %.2e)" % ("ok" if ok else "FAIL", float(out), float(fw), e),
              flush=True)
        del lg, tg, go
    except Exception as e:  # noqa: BLE001
        ok = False
        print("  plan.launcher vs forward: FAIL %s: %s" % (type(e).__name__, e), flush=True)
    records.append({"case": {"name": "plan.launcher == forward"}, "ok": ok, "err": 0.0, "notes": []})
    failed += 0 if ok else 1

    bad = bad_target_checks(xe, gen, args.verbose)
    bad_failed = sum(1 for _, ok, _ in bad if not ok)
    print("bad targets: %d checks, %d failed" % (len(bad), bad_failed), flush=True)

    ncases = len(records) + len(bad)
    nfailed = failed + bad_failed
    print("torch same-dtype max rel err vs float64 (for scale): %.3g" % max_torch)
    print("time %.1f s" % (time.time() - t0))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": args.seed, "tol": args.tol, "torch": torch.__version__,
                       "device": torch.cuda.get_device_name(), "records": records,
                       "bad_targets": bad}, f, indent=1, default=str)
    print("torch crosscheck: %d cases, %d failed, max rel err %.3g" % (ncases, nfailed, max_err))
    xe.close()
    return 1 if nfailed else 0


if __name__ == "__main__":
    sys.exit(main())
