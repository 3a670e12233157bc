#!/usr/bin/env python3
"""xent on problems drawn at random: untuned (the shipped cache through the lookup) against tuned,
both against the one-shot read floor of the same bytes, in one process.

    python3 bench/random_problems.py --list [--seed 12 --problems 40]     # the problems, no GPU
    PYTHONUNBUFFERED=1 python3 bench/random_problems.py --out DIR [--only 0..19] [--no-tune | --budget 10]
    python3 bench/random_problems.py --merge DIR1/random.json DIR2/random.json --out DIR  # one report
    python3 bench/random_problems.py --compare A/random.json B/random.json  # A's untuned against B's

With --with-fixed the issue's table of problems follows the draw (numbered from --problems, left
out of the distribution): 65536x8192 f16 mean and none, 12288x50257 bf16 none, 7x1000003 f32 mean
and none (the few-rows mean against its none), 2048x151936 bf16 mean, 100000x1000 f32 mean and the
reference 32768x4096 f32 mean.

The draw (seeded; --list prints it): dtype f32/f16/bf16, targets i32/i64, reduction none/sum/mean,
each uniform; class weights, label smoothing 0.1, the lse output each with probability 1/4; rows
strided (row_stride = c + 1..64) with probability 1/5; c log-uniform in [2, 1M], n log-uniform in
[1, 4M], n lowered where the logits (n x row_stride) would pass --cap-gb (default 4 GB).

For each problem, in this order:
  tune      (unless --no-tune) build/xent-tune --shape NxC --dtype D --targets T --reduction R
            [-w] [-l 0.1] [--lse] [--row-stride S] --budget S --db SCRATCH/tuned.db --json: the
            problem's own winner in a scratch cache (--scratch, default /tmp/xent-random).
  inputs    k copies of the logits and targets, k the smallest >= 2 with k x bytes > 4 x L2, at
            most 64 (the smallest problems are then partly read from L2, by every measurement alike).
  floor     bench.py's reads of the same bytes (logits n x c, targets): grid-stride at 4, 8, 16
            blocks per SM and the one-shot read; the fastest is the floor.
  untuned   a context with XENT_TUNECACHE at a path that does not exist and XENT_DATADIR at the
            shipped caches (default: this checkout's tunecache/): what a user who never tuned gets.
            Its result is checked against float32 PyTorch first (relative 1e-3) and its plan's
            source and note recorded.
  tuned     a fresh context reading SCRATCH/tuned.db as its user cache (the same check).
            With --tuned-from REPORT, the tune step times the top three configs of REPORT's tune
            of the same problem again (xent-tune --config ... --store-config) instead of
            searching: the earlier search's answer, timed beside this build's untuned plan (a
            few seconds a problem; for a cache or lookup change that leaves the templates alone).
  Timing: bench.py's protocol, back-to-back calls between CUDA events after a GPU sleep that
  lets the host queue them, median of --repeats (default 5) repeats of ~--target-ms (default 3).

Time (H200, estimates from the tuner's budget and bench.py's protocol):
  each problem without tuning: about 2-6 s (inputs up to 8 GB, the floor's four reads, the plan's
  compile on a cold kernel cache, a float32 reference);
  tuning: the budget plus 5-20 s a problem (the tuner's structure stage always runs to its end; on
  a cold kernel cache 16-bit problems compile a few hundred kernels at ~30 a second on 16 cores).
  So: --no-tune, 40 problems: ~3-4 min (one device call); --budget 30: ~45 s a problem, 10 problems a
  10-minute call (--only 0..9, 10..19, ...); --budget 10: ~25 s a problem, 20 a call.
  The kernel cache (XENT_KERNEL_CACHE) makes a second run of the same problems faster.

Output: DIR/random.json (every number, the plans' descriptions, the tuner's JSON) and
DIR/random.md: a table per problem and the distribution (median, worst) of untuned/tuned,
untuned/floor and tuned/floor, with how many problems are within 5% of tuned and within 1.10x of
the floor, then the issue's targets as measured (untuned within 5% and 10% of tuned; tuned against
the floor at 64 MB or more, fp32 at 256 MB or more, the reference problem, few rows of a huge
vocabulary). The tables are printed last (the device tool returns the end of the output).
"""

import argparse
import datetime
import gc
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
for d in (HERE, os.path.join(ROOT, "python")):
    if d not in sys.path:
        sys.path.insert(0, d)

ESIZE = {"f32": 4, "f16": 2, "bf16": 2}
C_RANGE = (2, 1 << 20)
N_RANGE = (1, 1 << 22)
MAX_COPIES = 64


def log(*a):
    print(*a, flush=True)


# ----------------------------------------------------------------------------
# the draw (no torch)
# ----------------------------------------------------------------------------

def log_uniform(r, lo, hi):
    return int(round(math.exp(r.uniform(math.log(lo), math.log(hi)))))


def draw(seed, count, cap_bytes):
    """count problems from one seeded generator; the same seed gives the same list."""
    r = random.Random(seed)
    out = []
    for i in range(count):
        p = {"idx": i,
             "dtype": r.choice(["f32", "f16", "bf16"]),
             "targets": r.choice(["i32", "i64"]),
             "reduction": r.choice(["none", "sum", "mean"]),
             "weights": r.random() < 0.25,
             "smoothing": 0.1 if r.random() < 0.25 else 0.0,
             "lse": r.random() < 0.25}
        strided = r.random() < 0.2
        c = log_uniform(r, *C_RANGE)
        n = log_uniform(r, *N_RANGE)
        stride = c + r.randint(1, 64) if strided else c
        p.update(c=c, stride=stride)
        n = max(1, min(n, cap_bytes // (stride * ESIZE[p["dtype"]])))
        p["n"] = n
        p["bytes"] = n * c * ESIZE[p["dtype"]] + n * (4 if p["targets"] == "i32" else 8)
        p["name"] = name_of(p)
        out.append(p)
    return out


# The problems of the table (fixed, i64 targets, no options), and the few-rows
# mean beside its none: appended after the draw with --with-fixed.
FIXED = [(65536, 8192, "f16", "mean"), (65536, 8192, "f16", "none"), (12288, 50257, "bf16", "none"),
         (7, 1000003, "f32", "mean"), (7, 1000003, "f32", "none"), (2048, 151936, "bf16", "mean"),
         (100000, 1000, "f32", "mean"), (32768, 4096, "f32", "mean")]


def fixed(first):
    out = []
    for i, (n, c, dt, red) in enumerate(FIXED):
        p = {"idx": first + i, "dtype": dt, "targets": "i64", "reduction": red, "weights": False,
             "smoothing": 0.0, "lse": False, "n": n, "c": c, "stride": c, "fixed": True}
        p["bytes"] = n * c * ESIZE[dt] + n * 8
        p["name"] = name_of(p)
        out.append(p)
    return out


def options_of(p):
    o = []
    if p["weights"]:
        o.append("weights")
    if p["smoothing"]:
        o.append("smoothing")
    if p["lse"]:
        o.append("lse")
    if p["stride"] != p["c"]:
        o.append("stride %d" % p["stride"])
    return o


def name_of(p):
    return "%dx%d %s %s %s%s" % (p["n"], p["c"], p["dtype"], p["targets"], p["reduction"],
                                 "".join(" +" + o for o in options_of(p)))


def parse_range(text, count):
    """'i..j', 'i', or a comma-separated list of either: the problems to measure."""
    if not text:
        return list(range(count))
    chosen = []
    for part in text.split(","):
        lo, _, hi = part.partition("..")
        chosen += [i for i in range(int(lo), (int(hi) if hi else int(lo)) + 1) if i < count]
    return chosen


# ----------------------------------------------------------------------------
# reports (no torch)
# ----------------------------------------------------------------------------

def fmt_bytes(b):
    if b >= 1e9:
        return "%.2f GB" % (b / 1e9)
    if b >= 1e6:
        return "%.1f MB" % (b / 1e6)
    return "%.1f kB" % (b / 1e3) if b >= 1e3 else "%d B" % b


def ratio(a, b):
    return a / b if a and b else None


def fmt_ratio(x):
    return "%.2fx" % x if x else "—"


def fmt_us(x):
    return "—" if not x else "%.1f" % x if x < 1000 else "%.0f" % x


def dist_line(what, vals):
    vals = [v for v in vals if v]
    if not vals:
        return "| %s | — | — | — | 0 |" % what
    return "| %s | %.3f | %.3f | %.3f | %d |" % (what, statistics.median(vals), max(vals), min(vals), len(vals))


def summary(rows):
    ut = [ratio(r.get("untuned", {}).get("us"), r.get("tuned", {}).get("us")) for r in rows]
    uf = [ratio(r.get("untuned", {}).get("us"), r.get("floor_us")) for r in rows]
    tf = [ratio(r.get("tuned", {}).get("us"), r.get("floor_us")) for r in rows]
    return ut, uf, tf


def targets(rows):
    """The issue's targets as lines: untuned against tuned on the drawn problems, tuned against the
    floor on every problem of 64 MB or more, fp32 of 256 MB or more, the reference problem and few
    rows of a huge vocabulary (mean)."""
    def tf(r):
        return ratio(r.get("tuned", {}).get("us"), r.get("floor_us"))

    out = []
    ut = [v for v in summary([r for r in rows if not r.get("fixed")])[0] if v]
    if ut:
        out.append("- untuned within 5%% of tuned: %d of %d; within 10%%: %d; worst %.3f"
                   % (sum(v <= 1.05 for v in ut), len(ut), sum(v <= 1.10 for v in ut), max(ut)))
    big = [(tf(r), r["name"]) for r in rows if r["bytes"] >= 64e6 and tf(r)]
    if big:
        out.append("- tuned, 64 MB or more, within 1.06x the floor: %d of %d" % (sum(v <= 1.06 for v, _ in big), len(big)))
    f32 = sorted((v, n) for v, n in ((tf(r), r["name"]) for r in rows
                                     if r["bytes"] >= 256e6 and r["dtype"] == "f32") if v)
    if f32:
        out.append("- tuned fp32, 256 MB or more: %.3f-%.3fx the floor (worst %s); within 1.03x: %d of %d"
                   % (f32[0][0], f32[-1][0], f32[-1][1], sum(v <= 1.03 for v, _ in f32), len(f32)))
    for r in rows:
        if r["n"] == 32768 and r["c"] == 4096 and r["dtype"] == "f32" and r["reduction"] == "mean" and tf(r):
            out.append("- reference %s: tuned %.3fx the floor" % (r["name"], tf(r)))
    for r in rows:
        if r["n"] <= 16 and r["c"] >= 500000 and r["reduction"] == "mean" and tf(r):
            out.append("- few rows, huge vocabulary, %s: tuned %.3fx the floor" % (r["name"], tf(r)))
    return out


def make_markdown(result):
    meta = result["meta"]
    rows = sorted(result["problems"].values(), key=lambda r: r["idx"])
    out = ["# xent on random problems: %s, %s" % (meta.get("gpu", "?"), meta.get("date", "?")), ""]
    tuned = ("tuned as below" if meta.get("tuned_from") else
             "tuner budget %s s" % meta.get("budget") if meta.get("tune") else "not tuned")
    out.append("Seed %s, %s problems drawn (%s measured here); build %s; %s; shipped caches %s."
               % (meta.get("seed"), meta.get("count"), len(rows), meta.get("commit", "?"), tuned,
                  meta.get("datadir")))
    out.append("Untuned: the lookup over the shipped cache, no user cache. Tuned: the problem's own "
               "`xent-tune` winner. Floor: the fastest read of the same bytes (one-shot or grid-stride). "
               "Times: back-to-back µs per call, median of repeats.")
    if meta.get("tuned_from"):
        out.append("Tuned here: the top three configs of the tunes in %s, timed again and the fastest taken."
                   % meta["tuned_from"])
    out.append("")
    out.append("## Distribution (the drawn problems)")
    out.append("")
    ut, uf, tf = summary([r for r in rows if not r.get("fixed")])
    out.append("| ratio | median | worst | best | problems |")
    out.append("| --- | ---: | ---: | ---: | ---: |")
    out.append(dist_line("untuned / tuned", ut))
    out.append(dist_line("untuned / floor", uf))
    out.append(dist_line("tuned / floor", tf))
    out.append("")
    n_ut = [v for v in ut if v]
    n_uf = [v for v in uf if v]
    if n_ut:
        out.append("Untuned within 5%% of tuned: %d of %d." % (sum(v <= 1.05 for v in n_ut), len(n_ut)))
    if n_uf:
        out.append("Untuned within 1.10x of the floor: %d of %d." % (sum(v <= 1.10 for v in n_uf), len(n_uf)))
    sources = {}
    for r in rows:
        if r.get("fixed"):
            continue
        s = r.get("untuned", {}).get("source")
        if s:
            sources[s] = sources.get(s, 0) + 1
    if sources:
        out.append("Untuned plans by source: %s." % ", ".join("%s %d" % kv for kv in sorted(sources.items())))
    out.append("")
    lines = targets(rows)
    if lines:
        out += ["## The issue's targets", ""] + lines + [""]
    out.append("## Problems")
    out.append("")
    out.append("| # | problem | bytes | floor µs | untuned µs | x floor | source | tuned µs | x floor | untuned/tuned |")
    out.append("| ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    for r in rows:
        u, t = r.get("untuned", {}), r.get("tuned", {})
        out.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["idx"], r["name"] + (" (fixed)" if r.get("fixed") else ""), fmt_bytes(r["bytes"]), fmt_us(r.get("floor_us")),
            fmt_us(u.get("us")) if u.get("us") else u.get("status", "—"), fmt_ratio(ratio(u.get("us"), r.get("floor_us"))),
            u.get("source", "—"),
            fmt_us(t.get("us")) if t.get("us") else t.get("status", "—"), fmt_ratio(ratio(t.get("us"), r.get("floor_us"))),
            fmt_ratio(ratio(u.get("us"), t.get("us")))))
    out.append("")
    out.append("## Plans")
    out.append("")
    out.append("| # | untuned plan | tuned plan |")
    out.append("| ---: | --- | --- |")
    for r in rows:
        out.append("| %d | `%s` | `%s` |" % (r["idx"], r.get("untuned", {}).get("describe", ""),
                                          r.get("tuned", {}).get("describe", "")))
    out.append("")
    return "\n".join(out)


def write_reports(result, outdir):
    import bench
    md = make_markdown(result)
    bench.save_json_and_markdown(result, md, outdir, "random")
    return md


def check_same_draw(first, other, first_path, other_path):
    """Exit naming other_path where its report is of another draw (seed, count) than first's."""
    def draw_of(r):
        return r["meta"].get("seed"), r["meta"].get("count")
    if draw_of(other) != draw_of(first):
        raise SystemExit("%s: another draw (seed/count) than %s" % (other_path, first_path))


def merge(paths, outdir):
    result = None
    for path in paths:
        with open(path) as f:
            part = json.load(f)
        if result is None:
            result = part
            continue
        check_same_draw(result, part, paths[0], path)
        result["problems"].update(part["problems"])
        result["meta"].setdefault("parts", []).append(part["meta"].get("date"))
    md = write_reports(result, outdir)
    print(md)
    return 0


# Problems of this many bytes or more are counted apart by --compare (the tuned target).
LARGE_BYTES = 64e6


def compare(path_a, path_b, margin=0.01):
    """A's untuned plans against B's, problem by problem, each time divided by its own run's floor
    (two runs of the same draw over other caches or builds): for the problems of LARGE_BYTES or
    more and the rest, how many A ran faster and slower by more than margin, and the geometric
    mean of A / B. Returns the table's lines."""
    runs = []
    for path in (path_a, path_b):
        with open(path) as f:
            runs.append(json.load(f))
    check_same_draw(runs[0], runs[1], path_a, path_b)
    groups = {True: [], False: []}
    for key, a in runs[0]["problems"].items():
        b = runs[1]["problems"].get(key)
        ra = ratio(a.get("untuned", {}).get("us"), a.get("floor_us"))
        rb = ratio((b or {}).get("untuned", {}).get("us"), (b or {}).get("floor_us"))
        if ra is not None and rb is not None:
            groups[a["bytes"] >= LARGE_BYTES].append(ra / rb)
    out = ["| problems | A faster by over %g%% | A slower by over %g%% | geometric mean, A / B |"
           % (100 * margin, 100 * margin), "| --- | ---: | ---: | ---: |"]
    for large, label in ((True, "%g MB or more" % (LARGE_BYTES / 1e6)), (False, "less")):
        r = groups[large]
        if r:
            geo = math.exp(sum(math.log(x) for x in r) / len(r))
            out.append("| %s (%d) | %d | %d | %.3f |" % (label, len(r), sum(x < 1 - margin for x in r),
                                                        sum(x > 1 + margin for x in r), geo))
    return out


# ----------------------------------------------------------------------------
# measurement (torch from here on)
# ----------------------------------------------------------------------------

def earlier_configs(args, p):
    """The configs the --tuned-from report's tune of problem p ranked first (its top), or []."""
    rec = args.earlier.get(str(p["idx"]), {})
    if rec.get("name") != p["name"]:
        return []
    res = rec.get("tune", {}).get("result", {})
    configs = [t["config"] for t in res.get("top", [])]
    best = res.get("best", {}).get("config")  # the heuristic, where nothing beat it
    return configs + [best] if best and best not in configs else configs


def problem_flags(p):
    """xent-tune's flags for problem p."""
    flags = ["--shape", "%dx%d" % (p["n"], p["c"]), "--dtype", p["dtype"], "--targets", p["targets"],
             "--reduction", p["reduction"]]
    if p["weights"]:
        flags.append("-w")
    if p["smoothing"]:
        flags += ["-l", str(p["smoothing"])]
    if p["lse"]:
        flags.append("--lse")
    if p["stride"] != p["c"]:
        flags += ["--row-stride", str(p["stride"])]
    return flags


def tune(args, p, db):
    """The problem's own winner into db: the tuner's JSON, or an error text. With --tuned-from,
    the earlier tune's top configs timed again and the fastest stored (xent-tune --store-config)."""
    cmd = [args.tune_bin] + problem_flags(p) + ["--budget", str(args.budget), "--db", db, "-q", "--json", "--top", "3"]
    if args.earlier is not None:
        given = earlier_configs(args, p)
        if not given:
            return {"rc": -1, "error": "the --tuned-from report has no tune of this problem"}
        for g in given:
            cmd += ["--config", g]
        cmd.append("--store-config")
    t0 = time.time()
    q = subprocess.run(cmd, capture_output=True, text=True)
    rec = {"command": " ".join(cmd), "wall_s": round(time.time() - t0, 1), "rc": q.returncode}
    if q.returncode != 0:
        rec["error"] = (q.stderr or q.stdout).strip()[-500:]
        return rec
    try:
        rec["result"] = json.loads(q.stdout)[0]
    except (ValueError, IndexError) as e:
        rec["error"] = "unreadable tuner output (%s): %s" % (e, q.stdout[-300:])
    return rec


class Inputs:
    """k copies of one problem's tensors, and the float32 reference of copy 0."""

    def __init__(self, torch, F, p, l2):
        dt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[p["dtype"]]
        it = torch.int32 if p["targets"] == "i32" else torch.int64
        n, c, stride = p["n"], p["c"], p["stride"]
        self.k = max(2, min(MAX_COPIES, int(4 * l2 // p["bytes"]) + 1))
        self.full = [torch.rand(n, stride, device="cuda", dtype=dt) for _ in range(self.k)]
        self.L = [x[:, :c] if stride != c else x for x in self.full]
        self.T = [torch.randint(0, c, (n,), device="cuda", dtype=it) for _ in range(self.k)]
        # the floor reads as many bytes, contiguous: the start of each buffer
        self.flat = [x.reshape(-1)[: n * c] for x in self.full]
        self.W = torch.rand(c, device="cuda", dtype=torch.float32) + 0.5 if p["weights"] else None
        x = self.L[0].float()
        self.ref = F.cross_entropy(x, self.T[0].long(), weight=self.W, reduction=p["reduction"],
                                   label_smoothing=p["smoothing"])
        self.ref_lse = torch.logsumexp(x, dim=1) if p["lse"] else None
        del x


def rel_err(torch, got, ref):
    if not torch.isfinite(got).all():
        return float("inf")
    scale = max(1.0, float(ref.abs().max()))
    return float((got.double() - ref.double()).abs().max()) / scale


def time_xent(env, args, p, inp, user_cache, label):
    """Plan p in a fresh context whose user cache is user_cache; check, then time it."""
    torch = env.torch
    from xent._capi import Xent
    os.environ["XENT_TUNECACHE"] = user_cache  # read when the context opens its caches (first plan)
    rec = {}
    xe = Xent()
    try:
        prob = xe.problem(p["n"], p["c"], inp.L[0].dtype, inp.T[0].dtype, p["reduction"],
                          label_smoothing=p["smoothing"], has_weights=p["weights"], lse=p["lse"],
                          row_stride=p["stride"])
        t0 = time.time()
        plan = xe.plan_for(prob)
        rec["plan_s"] = round(time.time() - t0, 2)
        rec["source"] = plan.source_name
        rec["describe"] = plan.describe()
        out = torch.empty(p["n"] if p["reduction"] == "none" else 1, device="cuda", dtype=torch.float32)
        lse = torch.empty(p["n"], device="cuda", dtype=torch.float32) if p["lse"] else None
        fns = [plan.launcher(inp.L[i], inp.T[i], out, inp.W, lse) for i in range(inp.k)]
        out.fill_(float("nan"))
        fns[0]()
        torch.cuda.synchronize()
        ref = inp.ref.reshape(-1)
        rec["rel_err"] = rel_err(torch, out, ref)
        if lse is not None:
            rec["rel_err"] = max(rec["rel_err"], rel_err(torch, lse, inp.ref_lse))
        if not rec["rel_err"] <= 1e-3:
            rec["status"] = "wrong (rel err %.1e)" % rec["rel_err"]
            log("    %-8s WRONG: rel err %.2e  %s" % (label, rec["rel_err"], rec["describe"]))
            return rec
        import bench
        m = bench.measure(env, fns, args.repeats, args.target_ms, 0)
        rec["us"] = m["b2b_us"]
        rec["b2b_all"] = m["b2b_all"]
        rec["status"] = "ok"
        log("    %-8s %9.1f us  [%s]" % (label, rec["us"], rec["describe"]))
        rc = xe.check_targets()
        if rc:
            rec["status"] = "bad targets flag %d" % rc
    except Exception as e:  # noqa: BLE001 - one problem's failure is a row of the table, not the end
        rec["status"] = "error: %s: %s" % (type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")
        log("    %-8s %s" % (label, rec["status"]))
    finally:
        xe.close()
    return rec


def measure_floor(env, args, p, inp):
    import bench
    shape = {"name": p["name"], "n": p["n"], "c": p["c"], "dtype": p["dtype"], "bytes": p["bytes"]}
    st = bench.setup_read(env, inp.flat, inp.T, shape)
    m = bench.measure(env, st.fns, args.repeats, args.target_ms, 0)
    return m["b2b_us"], st.info, st.notes


def run_problem(env, args, p, scratch):
    torch, F = env.torch, env.F
    rec = dict(p)
    t0 = time.time()
    log("== %d: %s, %s  [t=%.0f s]" % (p["idx"], p["name"], fmt_bytes(p["bytes"]), time.time() - args.t_start))
    if args.tune:
        rec["tune"] = tune(args, p, os.path.join(scratch, "tuned.db"))
        tr = rec["tune"].get("result")
        if tr:
            log("    tuned in %.0f s: %d timed, best %.1f us, heuristic %.1f us, tuner floor %.1f us"
                % (rec["tune"]["wall_s"], tr["timed"], tr["best"]["us"], tr["heuristic"]["us"], tr["floor_us"]))
        else:
            log("    tune failed: %s" % rec["tune"].get("error"))
    inp = None
    try:
        inp = Inputs(torch, F, p, env.l2)
        rec["copies"] = inp.k
        try:  # without a floor the untuned/tuned ratio still stands
            rec["floor_us"], rec["floor_info"], rec["floor_notes"] = measure_floor(env, args, p, inp)
            log("    floor    %9.1f us  (%s)" % (rec["floor_us"], "; ".join(rec["floor_notes"])))
        except Exception as e:  # noqa: BLE001
            rec["floor_error"] = "%s: %s" % (type(e).__name__, e)
            log("    floor failed: %s" % rec["floor_error"])
        rec["untuned"] = time_xent(env, args, p, inp, os.path.join(scratch, "no-user-cache.db"), "untuned")
        if args.tune and rec["tune"].get("result"):
            rec["tuned"] = time_xent(env, args, p, inp, os.path.join(scratch, "tuned.db"), "tuned")
    except Exception as e:  # noqa: BLE001
        rec["error"] = "%s: %s" % (type(e).__name__, e)
        log("    failed: %s" % rec["error"])
    finally:
        del inp
        gc.collect()
        torch.cuda.empty_cache()
    rec["seconds"] = round(time.time() - t0, 1)
    return rec


def commit():
    try:
        with open(os.path.join(ROOT, "build", "COMMIT")) as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def run(args, problems):
    import torch
    import torch.nn.functional as F
    import bench
    if not torch.cuda.is_available():
        log("no CUDA device visible to torch")
        return 2
    os.environ.setdefault("XENT_DATADIR", os.path.join(ROOT, "tunecache"))
    bargs = argparse.Namespace(head_start=True)
    env = bench.Env(bargs)
    env.torch, env.F = torch, F
    meta = {"gpu": torch.cuda.get_device_name(), "sm_count": env.sm_count, "l2_bytes": env.l2,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": " ".join(["python3"] + [os.path.relpath(sys.argv[0])] + sys.argv[1:]),
            "seed": args.seed, "count": args.problems, "only": args.only, "tune": args.tune,
            "budget": args.budget, "datadir": os.environ["XENT_DATADIR"], "commit": commit(),
            "tuned_from": args.tuned_from,
            "repeats": args.repeats, "target_ms": args.target_ms, "cap_gb": args.cap_gb}
    result = {"meta": meta, "problems": {}}
    args.t_start = time.time()
    os.makedirs(args.out, exist_ok=True)
    # the tuned cache and the user cache that is never made: outside --out, whose files come back
    os.makedirs(args.scratch, exist_ok=True)
    if os.path.exists(os.path.join(args.scratch, "no-user-cache.db")):
        raise SystemExit("%s/no-user-cache.db exists: the untuned plans must find no user cache" % args.scratch)
    chosen = parse_range(args.only, len(problems))
    log("GPU %s (%d SMs); %d of %d problems (seed %d); tune %s"
        % (meta["gpu"], env.sm_count, len(chosen), len(problems), args.seed,
           "budget %s s" % args.budget if args.tune else "off"))
    with torch.no_grad():
        for i in chosen:
            result["problems"][str(i)] = run_problem(env, args, problems[i], args.scratch)
            write_reports(result, args.out)
    meta["seconds"] = round(time.time() - args.t_start, 1)
    md = write_reports(result, args.out)
    log("")
    log(md)
    log("wrote %s/random.json and random.md in %.0f s" % (args.out, meta["seconds"]))
    return 0


def lookup_config(args, p):
    """The config the runtime's lookup gives problem p on the H200 (xent-tune --dry-run), or None."""
    q = subprocess.run([args.tune_bin, "--dry-run", "--gpu", "h200", "--json"] + problem_flags(p),
                       capture_output=True, text=True)
    try:
        return json.loads(q.stdout)[0]["lookup"]["config"]
    except (ValueError, IndexError, KeyError, TypeError):
        return None


def compile_only(args, problems):
    """Every candidate of the chosen problems compiled for the H200 into $XENT_KERNEL_CACHE (no GPU),
    so that their tunes on the GPU machine spend the budget timing, not compiling. With --tuned-from,
    only what such a run times: the lookup's plan and the earlier report's top configs."""
    if not os.environ.get("XENT_KERNEL_CACHE"):
        raise SystemExit("--compile-only: set XENT_KERNEL_CACHE to the folder to fill")
    for i in parse_range(args.only, len(problems)):
        p = problems[i]
        t0 = time.time()
        only = []
        if args.earlier is not None:
            for c in earlier_configs(args, p) + [lookup_config(args, p)]:
                only += ["--config", c] if c else []
        q = subprocess.run([args.tune_bin, "--compile-only", "--gpu", "h200", "-q"] + problem_flags(p) + only,
                           capture_output=True, text=True)
        if q.returncode != 0:
            log("%d %s: xent-tune --compile-only failed (%d): %s" % (i, p["name"], q.returncode, q.stderr.strip()[-300:]))
            return 1
        count = sum(1 for line in q.stdout.splitlines() if "=" in line and not line.startswith("#"))
        log("%d %s: %d candidates compiled in %.0f s" % (i, p["name"], count, time.time() - t0))
    return 0


def main():
    ap = argparse.ArgumentParser(description="xent on random problems: untuned vs tuned vs the read floor")
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--problems", type=int, default=40, help="how many to draw (default 40)")
    ap.add_argument("--only", help="i..j: measure only problems i to j (inclusive) of the draw; a comma list of such parts")
    ap.add_argument("--list", action="store_true", help="print the drawn problems and exit (no GPU)")
    ap.add_argument("--compile-only", action="store_true",
                    help="compile the chosen problems' candidates into $XENT_KERNEL_CACHE and exit (no GPU); "
                         "with --tuned-from, only the lookup's plan and the report's top configs")
    ap.add_argument("--with-fixed", action="store_true",
                    help="append the issue's %d fixed problems after the draw (numbered from --problems)" % len(FIXED))
    ap.add_argument("--no-tune", dest="tune", action="store_false", help="untuned and floor only")
    ap.add_argument("--budget", type=float, default=30, help="xent-tune budget a problem, seconds (default 30)")
    ap.add_argument("--tune-bin", default=os.path.join(ROOT, "build", "xent-tune"))
    ap.add_argument("--cap-gb", type=float, default=4.0, help="largest logits buffer, GB (default 4)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--target-ms", type=float, default=3.0)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "random"))
    ap.add_argument("--scratch", default=os.path.join(tempfile.gettempdir(), "xent-random"),
                    help="folder of the tuned cache (tuned.db), kept between pieces (default /tmp/xent-random)")
    ap.add_argument("--merge", nargs="+", metavar="JSON", help="combine parts' random.json into one report")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"),
                    help="A's untuned plans against B's (two reports of the same draw), by size")
    ap.add_argument("--tuned-from", metavar="JSON",
                    help="instead of tuning, time again the top configs of this earlier report's tunes "
                         "(the same draw) and take the fastest as the tuned plan")
    args = ap.parse_args()
    if args.merge:
        return merge(args.merge, args.out)
    if args.compare:
        print("\n".join(compare(*args.compare)))
        return 0
    args.earlier = None
    if args.tuned_from:
        with open(args.tuned_from) as f:
            args.earlier = json.load(f)["problems"]
    problems = draw(args.seed, args.problems, int(args.cap_gb * 1e9))
    if args.with_fixed:
        problems += fixed(len(problems))
    if args.list:
        print("| # | problem | bytes |")
        print("| ---: | --- | ---: |")
        for p in problems:
            print("| %d | %s | %s |" % (p["idx"], p["name"], fmt_bytes(p["bytes"])))
        return 0
    try:
        sys.stdout.reconfigure(line_buffering=True)
    except Exception:  # noqa: BLE001
        pass
    if args.compile_only:
        return compile_only(args, problems)
    return run(args, problems)


if __name__ == "__main__":
    sys.exit(main())
