#!/usr/bin/env python3
"""Two configs of one problem, timed in one xent-tune process, a few times over.

    python3 bench/config_pairs.py PAIRS_FILE [--reps 2] [--tune build/xent-tune] [--out DIR]
    XENT_KERNEL_CACHE=DIR python3 bench/config_pairs.py PAIRS_FILE --compile-only [--tune ...]

Each line of PAIRS_FILE (blank lines and '#' comments skipped):

    SHAPE DTYPE | CONFIG A | CONFIG B | XENT-TUNE FLAGS

for example

    5501x16908 f32 | VEC=4 TPR=256 BLOCK=256 ITEMS=16 ... | VEC=4 TPR=256 BLOCK=256 ITEMS=4 ... | -r none --row-stride 16912

`xent-tune --config A --config B` checks both against the reference and times both with the
tuner's protocol in the same process, so a rule that changes a config is measured against
the config it replaces without the drift between processes. Prints a line a pair and
repetition, then a table of B / A; --out writes pairs.json and pairs.md there. Needs the GPU,
but for --compile-only, which compiles both configs of every pair for the H200 into
$XENT_KERNEL_CACHE (for tools/pack-kernels.sh), so that the GPU's run times instead of compiling.
"""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def knobs(text):
    """{'VEC': 4, ...} of a config text."""
    return {k: int(v) for k, v in re.findall(r"([A-Z]+)=(\d+)", text)}


def matches(given, timed):
    """Whether a config the tuner printed (every knob) is the one given (some knobs):
    a knob left out of the given text takes its first value, 0 for the optional ones."""
    g, t = knobs(given), knobs(timed)
    return all(t.get(k, 0) == v for k, v in g.items()) and not any(v for k, v in t.items() if k not in g)


def parse_pairs(path):
    pairs = []
    for n, line in enumerate(open(path), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 3 or len(parts[0].split()) != 2:
            raise SystemExit("%s:%d: want 'SHAPE DTYPE | CONFIG A | CONFIG B [| FLAGS]'" % (path, n))
        shape, dtype = parts[0].split()
        pairs.append({"shape": shape, "dtype": dtype, "a": parts[1], "b": parts[2],
                      "flags": parts[3].split() if len(parts) > 3 else []})
    return pairs


def pair_args(p):
    """xent-tune's arguments for a pair's problem and both its configs."""
    return ["--shape", p["shape"], "--dtype", p["dtype"], "--config", p["a"], "--config", p["b"], *p["flags"]]


def compile_pairs(tune, pairs):
    """Both configs of each pair compiled for the H200 into $XENT_KERNEL_CACHE (no GPU)."""
    if not os.environ.get("XENT_KERNEL_CACHE"):
        raise SystemExit("--compile-only: set XENT_KERNEL_CACHE to the folder to fill")
    failed = 0
    for i, p in enumerate(pairs, 1):
        q = subprocess.run([tune, "--compile-only", "--gpu", "h200", "-q"] + pair_args(p), capture_output=True, text=True)
        if q.returncode != 0:
            failed += 1
            print("not compiled: %s %s: %s" % (p["shape"], p["dtype"], q.stderr.strip()[-300:]), file=sys.stderr)
        print("compiled %d/%d: %s %s" % (i, len(pairs), p["shape"], p["dtype"]), file=sys.stderr, flush=True)
    print("%d of %d pairs compiled into %s" % (len(pairs) - failed, len(pairs), os.environ["XENT_KERNEL_CACHE"]))
    return 1 if failed else 0


def time_pair(tune, p, db):
    """(us of A, us of B), None for a config that did not run."""
    cmd = [tune] + pair_args(p) + ["--db", db, "-q", "--json", "--top", "2"]
    q = subprocess.run(cmd, capture_output=True, text=True)
    if q.returncode != 0:
        print("  failed: %s" % (q.stderr or q.stdout).strip()[-300:], file=sys.stderr)
        return None, None
    top = json.loads(q.stdout)[0]["top"]
    pick = lambda given: next((t["us"] for t in top if matches(given, t["config"])), None)
    return pick(p["a"]), pick(p["b"])


def report(rows):
    lines = ["| problem | flags | A µs | B µs | B / A |", "| --- | --- | ---: | ---: | ---: |"]
    for r in rows:
        a, b = r["a_us"], r["b_us"]
        lines.append("| %s %s | %s | %s | %s | %s |" % (
            r["shape"], r["dtype"], " ".join(r["flags"]), " / ".join("%.2f" % x if x else "—" for x in a),
            " / ".join("%.2f" % x if x else "—" for x in b),
            " / ".join("%.3f" % (y / x) if x and y else "—" for x, y in zip(a, b))))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pairs")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--tune", default=os.path.join(ROOT, "build", "xent-tune"))
    ap.add_argument("--db", default="/tmp/xent-pairs.db", help="the tuner's scratch cache (nothing is stored)")
    ap.add_argument("--out", help="folder for pairs.json and pairs.md")
    ap.add_argument("--compile-only", action="store_true",
                    help="compile both configs of every pair into $XENT_KERNEL_CACHE and exit (no GPU)")
    args = ap.parse_args()
    pairs = parse_pairs(args.pairs)
    if args.compile_only:
        return compile_pairs(args.tune, pairs)
    rows = [dict(p, a_us=[], b_us=[]) for p in pairs]
    for rep in range(1, args.reps + 1):
        for r in rows:
            a, b = time_pair(args.tune, r, args.db)
            r["a_us"].append(a)
            r["b_us"].append(b)
            print("rep%d %s %s %s: A %s us, B %s us" % (rep, r["shape"], r["dtype"], " ".join(r["flags"]), a, b),
                  flush=True)
    md = report(rows)
    print(md)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "pairs.json"), "w") as f:
            json.dump(rows, f, indent=1)
        with open(os.path.join(args.out, "pairs.md"), "w") as f:
            f.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
