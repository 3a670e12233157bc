#!/usr/bin/env python3
"""A kernel cache made again for this build's templates: every kernel of a cache folder (XENT_KERNEL_CACHE,
docs/tuning.md "Compiling ahead") is rendered from its defines by this build's templates and compiled into
another folder, so that a template change does not throw away the kernels compiled ahead for the GPU
machine. No GPU needed.

    tools/recompile-kernels.py OLD_DIR NEW_DIR [--tune build/xent-tune] [--gpu h200] [--family xent_fwd]

Each kernel's key names its defines; they give back a config and a problem of the same kind (the
problem's n, its stride and the launch knobs are not compiled in, so any that render the same defines
will do: a one-block kernel that loads its rows' edges once gets a stride off the vector). Kernels are compiled by `xent-tune --compile-only`, 64 configs of a kind a call, and the new
folder's defines are checked against the old one's: the script says which it could not make again.
"""
import argparse
import collections
import os
import subprocess
import sys

import kcache_file

DTYPES = {0: "f32", 1: "f16", 2: "bf16"}
TARGETS = {0: "i32", 1: "i64"}
REDUCTIONS = {0: "none", 1: "sum", 2: "mean"}
OPS = {0: "forward", 1: "fused", 2: "backward"}  # XENT_MODE of xent_grad
CHUNK = 64  # xent-tune takes at most 64 --config


def defines_of(path):
    """The rendered defines of a kernel-cache file, as text and as a dict, or None."""
    got = kcache_file.read(path)
    return (got[0], kcache_file.defines(got[0])) if got else None


def kind_and_config(d):
    """(xent-tune's problem flags, config text) rendering these defines, or None where it cannot."""
    grad = "MODE" in d
    if grad and d.get("SHARD"):
        return None  # a shard's problem needs --vocab flags this script does not write
    c = d.get("C", 300 if d.get("TILE") else 100000 if d.get("SEGMENTED") else 50257 if grad else 4096)
    n = 1 if d.get("ONE_BLOCK") else 4096
    kind = ["--shape", "%dx%d" % (n, c), "--dtype", DTYPES[d["LOGIT"]], "--targets", TARGETS[d["TARGET"]],
            "--reduction", REDUCTIONS[d["REDUCTION"]]]
    kind += ["--weights"] if d.get("WEIGHTS") else []
    kind += ["--label-smoothing", "0.1"] if d.get("SMOOTHING") else []
    kind += ["--lse"] if d.get("LSE") else []
    # rows off a vector, where a kernel loads their edges once: by a stride off one when c is on one
    kind += ["--row-stride", str(c + 1)] if d.get("EDGES_ONCE") and c % d["VEC"] == 0 else []
    if grad:
        kind += ["--op", OPS[d["MODE"]]]
        kind += ["--z-loss", "0.001"] if d.get("ZLOSS") else []
        kind += ["--softcap", "30"] if d.get("SOFTCAP") else []
    split = d.get("SPLIT", 2 if d.get("SEGMENTED") else 1)
    knobs = ["VEC=%d" % d["VEC"], "TPR=%d" % d["TPR"], "BLOCK=%d" % d["BLOCK"], "ITEMS=%d" % d["ITEMS"],
             "PASSES=%d" % d.get("PASSES", 1), "CACHE=%d" % d["CACHE"], "TILE=%d" % d.get("TILE", 0),
             "SPLIT=%d" % split, "PERSIST=0"]
    knobs += ["%s=%d" % (k, d[k]) for k in ("PREFETCH", "POLY", "EVICT", "STASH", "FLAT") if k in d]
    return tuple(kind), " ".join(knobs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--tune", default="build/xent-tune")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--family", default="all", help="xent_fwd, xent_grad or all (default all)")
    a = ap.parse_args()
    os.makedirs(a.new, exist_ok=True)
    want, kinds, skipped = set(), collections.OrderedDict(), 0
    for name in sorted(os.listdir(a.old)):
        got = defines_of(os.path.join(a.old, name)) if name.endswith(".cubin") else None
        if not got:
            continue
        text, d = got
        if a.family != "all" and ("MODE" in d) != (a.family == "xent_grad"):
            continue
        kc = kind_and_config(d)
        if not kc:
            skipped += 1
            continue
        want.add(text)
        kinds.setdefault(kc[0], []).append(kc[1])
    total = sum(len(v) for v in kinds.values())
    print("%d kernels of %d kinds to compile (%d skipped)" % (total, len(kinds), skipped), flush=True)
    done = 0
    env = dict(os.environ, XENT_KERNEL_CACHE=a.new)
    for kind, configs in kinds.items():
        for i in range(0, len(configs), CHUNK):
            part = configs[i:i + CHUNK]
            args = [a.tune, "--compile-only", "-q", "--gpu", a.gpu] + list(kind)
            for cfg in part:
                args += ["--config", cfg]
            if subprocess.run(args, env=env, capture_output=True).returncode:
                for cfg in part:  # one refused config fails the call: the others one by one
                    p = subprocess.run(args[:len(args) - 2 * len(part)] + ["--config", cfg], env=env,
                                       capture_output=True, text=True)
                    if p.returncode:
                        print("failed: %s --config '%s': %s" % (" ".join(kind), cfg, p.stderr.strip()[-300:]))
            done += len(part)
            print("%d/%d" % (done, total), file=sys.stderr, flush=True)
    have = set()
    for name in os.listdir(a.new):
        got = defines_of(os.path.join(a.new, name)) if name.endswith(".cubin") else None
        if got:
            have.add(got[0])
    missing = want - have
    for text in sorted(missing):
        print("not made again:", text.replace("\n", " ").strip())
    print("%d of %d kernels made again in %s" % (len(want) - len(missing), len(want), a.new))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
