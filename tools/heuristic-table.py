#!/usr/bin/env python3
"""Derive the xent_fwd heuristic's table from a shipped tune cache.

    python3 tools/heuristic-table.py [tunecache/h200.sql] [--markdown]
    python3 tools/heuristic-table.py [tunecache/h200.sql] --check gen/heuristic.c

Prints the C table that gen/heuristic.c holds between its "heuristic-table"
markers (or, with --markdown, the same cells as a table for docs/cache.md);
--check exits 1 when gen/heuristic.c's table is not what the cache gives.

The model: a cell per element size (4 bytes, 2 bytes), row-length band and
row-count band holds the knobs of one tuned winner, of the fp32 and bf16
entries of i64 targets, mean and no options (the kind every sweep tunes). A cell keeps a thread's
chunk in bytes (ITEMS x VEC x element size) rather than ITEMS, so that a
cell measured for one dtype or vector width reads for another: the runtime
sets VEC by its own rule (the widest vector for rows of 256 or more, else
the widest that keeps every row aligned), ITEMS = chunk bytes / vector
bytes within the registers, TPR no wider than the row, and splits few rows
by the rule whose two constants are printed with the table.

  - Row-length bands: one per tuned row length c, bounded by the geometric
    means of neighbouring tuned lengths (c is compared in log space, as the
    nearest-entry lookup compares shapes).
  - Row-count bands, relative to the GPU's SM count S so that grids scale:
    few (n < S: rows alone cannot fill the GPU), mid (n < 32 S), many.
  - A cell's winner: of the entries in the cell, the one with the most bytes
    (n c), where time is spent; a tie goes to the larger tuning budget.
  - An empty cell takes, in order: the other element size's measured winner
    of the same cell; the same size's measured winner of the same row-count
    band and the nearest row-length band (the shorter on a tie).
  - Split rows (few band): the smallest segment, in elements, of any tuned
    winner that splits, and the most teams (n x SPLIT) of any such winner.
    The runtime takes the largest power of two SPLIT <= 128 whose segments
    keep at least that many elements and whose teams stay within that many
    per SM (scaled by its own SM count). Elements, not bytes: fp32 and bf16
    winners split the same rows into the same number of segments.
"""
import math
import re
import sqlite3
import sys

COLS = ("gpu, arch, sm_count, family, logits, targets, reduction, options, n, c, "
        "template_version, template_hash, nvrtc, config, us, gbps, measured_at, settings")
ESIZE = {0: 4, 1: 2, 2: 2}
BANDS_N = ("few", "mid", "many")
MID_ROWS_PER_SM = 32
KNOBS = ("TPR", "BLOCK", "CHUNK", "PASSES", "CACHE", "TILE", "PERSIST", "POLY")


def load(path):
    db = sqlite3.connect(":memory:")
    db.execute(f"CREATE TABLE tune({COLS})")
    db.executescript(open(path).read())
    # one kind per element size, the one every sweep tunes: fp32 and bf16, i64 targets, mean, no
    # options (a cell holds one winner; other kinds' entries at the same shapes would compete in it)
    rows = db.execute("SELECT logits, n, c, config, us, settings, sm_count FROM tune "
                      "WHERE family = 'xent_fwd' AND logits IN (0, 2) AND targets = 1 AND reduction = 2 "
                      "AND options = 0 ORDER BY logits, c, n").fetchall()
    out = []
    for logits, n, c, config, us, settings, sm in rows:
        cfg = dict((k, int(v)) for k, v in re.findall(r"(\w+)=(-?\d+)", config))
        budget = re.search(r"budget=(\d+)", settings or "")
        out.append(dict(esize=ESIZE[logits], n=n, c=c, cfg=cfg, us=us, sm=sm,
                        budget=int(budget.group(1)) if budget else 0))
    return out


def c_edges(entries):
    """Upper bounds (inclusive) of the row-length bands: geometric midpoints."""
    cs = sorted({e["c"] for e in entries})
    edges = [int(math.sqrt(a * b)) for a, b in zip(cs, cs[1:])]
    return cs, edges + [None]


def c_band(c, edges):
    for i, hi in enumerate(edges):
        if hi is None or c <= hi:
            return i
    return len(edges) - 1


def n_band(n, sm):
    return 0 if n < sm else 1 if n < MID_ROWS_PER_SM * sm else 2


def winners(entries, edges):
    cells = {}
    for e in entries:
        key = (e["esize"], c_band(e["c"], edges), n_band(e["n"], e["sm"]))
        best = cells.get(key)
        if best is None or (e["n"] * e["c"], e["budget"]) > (best["n"] * best["c"], best["budget"]):
            cells[key] = e
    return cells


def fill(cells, nbands_c):
    """Every cell: measured, else the other size's same cell, else the nearest c band."""
    table = {}
    for esize in (4, 2):
        other = 2 if esize == 4 else 4
        for cb in range(nbands_c):
            for nb in range(3):
                key = (esize, cb, nb)
                if key in cells:
                    table[key] = (cells[key], "measured")
                    continue
                if (other, cb, nb) in cells:
                    table[key] = (cells[(other, cb, nb)], f"{other}-byte cell")
                    continue
                near = sorted((abs(b - cb), b) for (s, b, m) in cells if s == esize and m == nb)
                if near:
                    table[key] = (cells[(esize, near[0][1], nb)], "nearest band")
    return table


def split_rule(entries):
    split = [e for e in entries if e["cfg"].get("SPLIT", 1) > 1]
    seg = min(e["c"] // e["cfg"]["SPLIT"] for e in split)
    # threads, not teams: a winner of 32-thread teams splits finer than one of 256-thread teams
    threads = max(e["n"] * e["cfg"]["SPLIT"] * e["cfg"]["TPR"] for e in split)
    sm = split[0]["sm"]
    return seg, threads, sm


def knob(e, name, esize):
    if name == "CHUNK":
        return e["cfg"]["ITEMS"] * e["cfg"]["VEC"] * e["esize"]
    v = e["cfg"].get(name, 0)
    if name == "POLY" and esize == 4:
        return 0  # fp32 takes no polynomial exponentials
    return v


def check(path, table):
    """0 when the file holds table between the markers, else 1 with a diff."""
    import difflib
    text = open(path).read()
    start = text.find("/* heuristic-table: generated")
    end = text.find("/* heuristic-table: end */")
    if start < 0 or end < 0:
        print("%s: no heuristic-table markers" % path)
        return 1
    held = text[start:end + len("/* heuristic-table: end */")] + "\n"
    if held == table:
        print("%s: the heuristic table is the cache's" % path)
        return 0
    sys.stdout.writelines(difflib.unified_diff(held.splitlines(True), table.splitlines(True), path, "derived"))
    return 1


def main(argv):
    md = "--markdown" in argv
    target = None
    if "--check" in argv:
        i = argv.index("--check")
        target = argv[i + 1] if i + 1 < len(argv) else "gen/heuristic.c"
        argv = argv[:i] + argv[i + 2:]
    if target:
        import contextlib
        import io
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            main(argv)
        return check(target, buf.getvalue())
    args = [a for a in argv if not a.startswith("--")]
    path = args[0] if args else "tunecache/h200.sql"
    entries = load(path)
    cs, edges = c_edges(entries)
    cells = winners(entries, edges)
    table = fill(cells, len(edges))
    seg, threads, sm = split_rule(entries)
    threads_per_sm = -(-threads // sm)  # rounded up
    if md:
        print(f"Derived from `{path}` ({len(entries)} xent_fwd entries, {sm} SMs). "
              f"Split rows: segments of at least {seg} elements, at most {threads_per_sm} of their threads per SM.\n")
        print("| bytes | c up to | rows | TPR | BLOCK | chunk bytes | PASSES | CACHE | TILE | PERSIST | POLY | from |")
        print("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
        for (esize, cb, nb), (e, how) in sorted(table.items(), key=lambda kv: (-kv[0][0], kv[0][1], kv[0][2])):
            hi = edges[cb] if edges[cb] is not None else "any"
            src = f"{e['n']}x{e['c']} {'f32' if e['esize'] == 4 else 'bf16'}"
            vals = " | ".join(str(knob(e, k, esize)) for k in ("TPR", "BLOCK", "CHUNK", "PASSES", "CACHE", "TILE",
                                                                "PERSIST", "POLY"))
            print(f"| {esize} | {hi} | {BANDS_N[nb]} | {vals} | {src} ({how}) |")
        return
    print(f"/* heuristic-table: generated by tools/heuristic-table.py from {path}; do not edit by hand */")
    print(f"#define HEUR_SPLIT_MIN_ELEMS {seg}")
    print(f"#define HEUR_SPLIT_THREADS_PER_SM {threads_per_sm}")
    print(f"#define HEUR_MID_ROWS_PER_SM {MID_ROWS_PER_SM}")
    print("static const heur_cell heur_cells[] = {")
    print("    /* bytes, c up to (0: any), rows, " + ", ".join(k for k in KNOBS) + "; the entry it came from */")
    for (esize, cb, nb), (e, how) in sorted(table.items(), key=lambda kv: (-kv[0][0], kv[0][1], kv[0][2])):
        hi = edges[cb] if edges[cb] is not None else 0
        vals = ", ".join(str(knob(e, k, esize)) for k in KNOBS)
        src = f"{e['n']}x{e['c']} {'f32' if e['esize'] == 4 else 'bf16'}"
        print(f"    {{{esize}, {hi}, HEUR_{BANDS_N[nb].upper()}, {vals}}}, /* {src}, {how} */")
    print("};")
    print("/* heuristic-table: end */")


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]) or 0)
    except BrokenPipeError:  # piped into head
        sys.exit(0)
