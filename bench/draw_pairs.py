#!/usr/bin/env python3
"""Draw a pair file for bench/config_pairs.py: problems at random, the lookup's plan (A) and one rule's change of it (B).

    python3 bench/draw_pairs.py vector --seed 21 --count 10 > bench/pairs/f32-vector-mid.txt
    python3 bench/draw_pairs.py team --dtypes f16,bf16 --blocks 3.5,6 --seed 23 --count 10
    python3 bench/draw_pairs.py tile --dtypes f16,bf16 --classes 129,512 --rows 20000,400000 --seed 31

Modes (A is what `xent-tune --dry-run --gpu GPU` says the runtime runs, from $XENT_DATADIR, by
default this checkout's tunecache/; problems the shipped cache answers exactly are skipped):

  vector  fp32 rows of --classes (odd lengths) and 8-256 MB whose plan narrows the vector to the
          rows' alignment; B: VEC=4 with as many elements a lane (scalar edges).
  team    --dtypes rows of --classes, --rows rows, whose plan gives --blocks blocks an SM
          (before B); B: a warp team twice as wide with half the chunk a lane.
  tile    --dtypes rows of --classes, --rows rows, whose plan is not a tile; B: TILE=1 (a warp
          stages 32 rows in shared memory with 16-byte loads, a thread reduces each), A's CACHE.
  poly    16-bit rows of --classes, --rows rows, whose plan computes every exponential on the
          MUFU pipe; B: the same with POLY=8 (one in eight on the FMA pipe).

The draw depends on the lookup of the commit it runs at: a rule that changes plans changes the
file. Needs build/xent-tune (no GPU).
"""
import argparse
import json
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from config_pairs import knobs  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPTIONAL = ("PREFETCH", "POLY", "EVICT", "STASH", "FLAT")


def text(k):
    """A config's text, leaving out the optional knobs at 0 (config_pairs.matches reads them so)."""
    return " ".join("%s=%d" % (a, b) for a, b in k.items() if not (a in OPTIONAL and b == 0))


def lookup(tune, gpu, n, c, dtype):
    """(config knobs, source) of the runtime's plan for an i64 mean problem."""
    seed = "VEC=%d TPR=1 BLOCK=128 ITEMS=1 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1" % (1 if dtype == "f32" else 2)
    cmd = [tune, "--dry-run", "--gpu", gpu, "-s", "%dx%d" % (n, c), "-d", dtype, "--json", "--config", seed]
    try:
        q = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise SystemExit("draw_pairs: %s: %s (build it with make)" % (tune, e.strerror))
    if q.returncode != 0:
        raise SystemExit("draw_pairs: %s failed: %s" % (" ".join(cmd), q.stderr.strip()[-300:]))
    got = json.loads(q.stdout)[0]["lookup"]
    return knobs(got["config"]), got["source"]


def blocks_per_sm(n, k, sms):
    rows = k["BLOCK"] // k["TPR"]
    return (n + rows - 1) // rows / sms


def wider_vector(k):
    if k["VEC"] >= 4 or k["ITEMS"] * k["VEC"] < 4:
        return None
    return dict(k, VEC=4, ITEMS=k["ITEMS"] * k["VEC"] // 4)


def wider_team(k):
    if k["ITEMS"] < 2 or 2 * k["TPR"] > 32 or k["SPLIT"] > 1:  # a warp team (BLOCK is 64 or more)
        return None
    return dict(k, TPR=2 * k["TPR"], ITEMS=k["ITEMS"] // 2)


def tile(k, dtype):
    if k["TILE"]:
        return None
    return {"VEC": 4 if dtype == "f32" else 8, "TPR": 1, "BLOCK": 128, "ITEMS": 1, "PASSES": 2, "CACHE": k["CACHE"],
            "TILE": 1, "SPLIT": 1, "PERSIST": 1}


def poly(k, c):
    if k.get("POLY", 0) or k["TILE"] or c < 512 or k["ITEMS"] * k["VEC"] < 16:
        return None
    return dict(k, POLY=8)


CHANGES = {"vector": lambda k, dtype, c: wider_vector(k), "team": lambda k, dtype, c: wider_team(k),
           "tile": lambda k, dtype, c: tile(k, dtype), "poly": lambda k, dtype, c: poly(k, c)}


def draw(args, rng):
    lo_c, hi_c = args.classes
    if args.mode == "vector":
        c = rng.randrange(lo_c, hi_c) | 1
        return "f32", int(rng.uniform(8e6, 256e6) / (4 * c)), c
    dtype, c = rng.choice(args.dtypes), rng.randrange(lo_c, hi_c)
    return dtype, rng.randrange(*args.rows), c


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=sorted(CHANGES))
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--sms", type=int, default=132, help="the GPU's SM count, for --blocks")
    ap.add_argument("--dtypes", default="f16,bf16", type=lambda s: s.split(","), help="(team, tile; poly takes "
                    "the 16-bit ones)")
    ap.add_argument("--classes", type=lambda s: tuple(int(x) for x in s.split(",")), help="lo,hi (default: "
                    "257,2048 for vector, 250,4000 for team and poly, 65,256 for tile)")
    ap.add_argument("--rows", default="3000,40000", type=lambda s: tuple(int(x) for x in s.split(",")))
    ap.add_argument("--blocks", default="0,3.2", type=lambda s: tuple(float(x) for x in s.split(",")),
                    help="lo,hi blocks an SM of A's plan (team)")
    ap.add_argument("--tune", default=os.path.join(ROOT, "build", "xent-tune"))
    args = ap.parse_args()
    args.classes = args.classes or {"vector": (257, 2048), "tile": (65, 256)}.get(args.mode, (250, 4000))
    if args.mode == "poly":
        args.dtypes = [d for d in args.dtypes if d != "f32"] or ["f16", "bf16"]
    os.environ.setdefault("XENT_DATADIR", os.path.join(ROOT, "tunecache"))
    rng, found, tries = random.Random(args.seed), 0, 0
    while found < args.count:
        tries += 1
        if tries > 1000 * args.count:
            raise SystemExit("draw_pairs: only %d problems in %d draws fit; widen the bounds" % (found, tries))
        dtype, n, c = draw(args, rng)
        a, source = lookup(args.tune, args.gpu, n, c, dtype)
        if source == "shipped":
            continue
        if args.mode == "team" and not args.blocks[0] <= blocks_per_sm(n, a, args.sms) < args.blocks[1]:
            continue
        b = CHANGES[args.mode](a, dtype, c)
        if b:
            print("%dx%d %s | %s | %s |" % (n, c, dtype, text(a), text(b)))
            found += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
