"""CPU tests of the measurement scripts in bench/: what their reports and the docs' tables rest on.

    python3 -m pytest -q tests/test_bench.py

No GPU and no torch: the scripts import those only to measure.
"""
import glob
import json
import math
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import config_pairs  # noqa: E402
import draw_pairs  # noqa: E402
import random_problems as rp  # noqa: E402


@pytest.mark.parametrize("text, count, want", [
    ("", 4, [0, 1, 2, 3]),
    ("2", 4, [2]),
    ("1..3", 9, [1, 2, 3]),
    ("0,3..4,9", 5, [0, 3, 4]),
    ("46,47", 48, [46, 47]),
])
def test_parse_range(text, count, want):
    assert rp.parse_range(text, count) == want


@pytest.mark.parametrize("idx, name", [
    (0, "18242x1151 f16 i64 mean"),
    (18, "13183x2505 f16 i32 mean"),
    (33, "367696x217 bf16 i32 mean +weights"),
])
def test_the_draw_is_the_documented_one(idx, name):
    """docs/random-problems.md's rows are these problems: the seeded draw must not move."""
    assert rp.draw(12, 40, int(4e9))[idx]["name"] == name


@pytest.mark.parametrize("idx, want", [
    (18, "--shape 13183x2505 --dtype f16 --targets i32 --reduction mean"),
    (8, "--shape 9712x1416 --dtype bf16 --targets i32 --reduction mean -w -l 0.1"),
    (11, "--shape 4166x232 --dtype f16 --targets i32 --reduction none --lse --row-stride 252"),
])
def test_problem_flags(idx, want):
    """The tune and the compile ahead pass a problem to xent-tune with the same flags."""
    assert " ".join(rp.problem_flags(rp.draw(12, 40, int(4e9))[idx])) == want


def report(seed=12, problems=None, date="d"):
    return {"meta": {"seed": seed, "count": 40, "date": date}, "problems": problems or {}}


def tune_record(name, top, best):
    return {"name": name, "tune": {"result": {"top": [{"config": c} for c in top], "best": {"config": best}}}}


@pytest.mark.parametrize("earlier, want", [
    ({"18": tune_record("13183x2505 f16 i32 mean", ["A", "B"], "A")}, ["A", "B"]),
    ({"18": tune_record("13183x2505 f16 i32 mean", ["A", "B"], "H")}, ["A", "B", "H"]),  # the heuristic won
    ({"18": tune_record("another problem", ["A"], "A")}, []),  # another draw's problem 18
    ({}, []),
])
def test_earlier_configs(earlier, want):
    p = rp.draw(12, 40, int(4e9))[18]
    args = type("Args", (), {"earlier": earlier})()
    assert rp.earlier_configs(args, p) == want


FAKE_TUNE = """#!/bin/sh
# xent-tune as compile_only calls it: records each call; --dry-run answers the lookup's config L
echo "$*" >> "$(dirname "$0")/calls"
case "$*" in *--dry-run*) echo '[{"lookup": {"config": "L"}}]' ;; *) echo "VEC=1 ..." ;; esac
"""


@pytest.mark.parametrize("earlier, want", [
    (None, []),  # a tune's compile ahead: every candidate
    ({"18": tune_record("13183x2505 f16 i32 mean", ["A", "B"], "A")}, ["A", "B", "L"]),
    ({"18": tune_record("another problem", ["A"], "A")}, ["L"]),  # no earlier tune: the lookup's alone
])
def test_compile_only_compiles_what_the_run_times(tmp_path, monkeypatch, earlier, want):
    """--compile-only compiles every candidate, or with --tuned-from only what that run times: the
    earlier report's top configs and the lookup's plan."""
    tune = tmp_path / "xent-tune"
    tune.write_text(FAKE_TUNE)
    tune.chmod(0o755)
    monkeypatch.setenv("XENT_KERNEL_CACHE", str(tmp_path))
    args = type("Args", (), {"earlier": earlier, "tune_bin": str(tune), "only": "18"})()
    assert rp.compile_only(args, rp.draw(12, 40, int(4e9))) == 0
    compile_call = [c for c in (tmp_path / "calls").read_text().splitlines() if "--compile-only" in c]
    assert len(compile_call) == 1
    words = compile_call[0].split()
    assert [words[i + 1] for i, w in enumerate(words) if w == "--config"] == want


def measured(idx, untuned_us):
    rec = dict(rp.draw(12, 40, int(4e9))[idx])
    rec.update(floor_us=1.0, untuned={"us": untuned_us, "source": "nearest"}, tuned={"us": 1.0})
    return rec


def test_merge_takes_later_parts(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(report(problems={"1": measured(1, 3.0), "2": measured(2, 2.0)})))
    b.write_text(json.dumps(report(problems={"1": measured(1, 1.5)}, date="e")))
    rp.merge([str(a), str(b)], str(tmp_path / "out"))
    joined = json.loads((tmp_path / "out" / "random.json").read_text())
    assert joined["problems"]["1"]["untuned"]["us"] == 1.5 and "2" in joined["problems"]
    assert joined["meta"]["parts"] == ["e"]
    assert "| 1 | %s |" % measured(1, 0)["name"] in (tmp_path / "out" / "random.md").read_text()


def test_merge_refuses_another_draw(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(report()))
    b.write_text(json.dumps(report(seed=13)))
    with pytest.raises(SystemExit, match="another draw"):
        rp.merge([str(a), str(b)], str(tmp_path / "out"))


def test_compare_counts_by_size(tmp_path):
    """--compare divides each run's untuned time by its own floor, and counts the problems of 64 MB
    or more apart from the rest: here A is 2x faster on a large one and 1.5x slower on a small one,
    and within the margin on another small one."""
    big, small, same = 3, 1, 2  # 2782x718738 bf16 (4 GB), 25x175 f16, 1217886x6 bf16 (19 MB)
    drawn = rp.draw(12, 40, int(4e9))
    assert drawn[big]["bytes"] >= rp.LARGE_BYTES > drawn[small]["bytes"]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(report(problems={"3": measured(big, 1.0), "1": measured(small, 3.0),
                                             "2": measured(same, 2.0)})))
    b.write_text(json.dumps(report(problems={"3": measured(big, 2.0), "1": measured(small, 2.0),
                                             "2": measured(same, 2.01)})))
    lines = rp.compare(str(a), str(b))
    assert lines[2] == "| 64 MB or more (1) | 1 | 0 | 0.500 |"
    assert lines[3] == "| less (2) | 0 | 1 | %.3f |" % math.sqrt(1.5 * 2.0 / 2.01)
    b.write_text(json.dumps(report(seed=13)))
    with pytest.raises(SystemExit, match="another draw"):
        rp.compare(str(a), str(b))


@pytest.mark.parametrize("tuned_from, want", [
    ("earlier.json", "tuned as below"),
    (None, "tuner budget 10 s"),
])
def test_report_says_how_it_tuned(tuned_from, want):
    r = report()
    r["meta"].update(tune=True, budget=10, tuned_from=tuned_from)
    assert want in rp.make_markdown(r)


@pytest.mark.parametrize("given, printed, want", [
    ("VEC=4 TPR=32", "VEC=4 TPR=32 POLY=0", True),
    ("VEC=4 TPR=32", "VEC=4 TPR=32 POLY=8", False),  # a knob left out reads as 0
    ("VEC=4 TPR=64", "VEC=4 TPR=32", False),
])
def test_pair_config_matches(given, printed, want):
    assert config_pairs.matches(given, printed) is want


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "bench", "pairs", "*.txt"))))
def test_pair_files_parse(path):
    pairs = config_pairs.parse_pairs(path)
    assert pairs
    for p in pairs:
        assert p["a"] != p["b"] and "x" in p["shape"] and p["dtype"] in ("f32", "f16", "bf16")


PAIRS = """# a comment
300x4096 f32 | VEC=4 TPR=32 | VEC=4 TPR=64 | -r none --weights
7x100 bf16 | VEC=8 TPR=8 | VEC=8 TPR=16
"""


def test_pairs_compile_only_compiles_both_configs_of_each_pair(tmp_path, monkeypatch):
    """--compile-only asks xent-tune to compile both configs of each pair, with the pair's flags, for
    the H200; a pair it refuses is said and makes the run fail."""
    tune = tmp_path / "xent-tune"
    tune.write_text('#!/bin/sh\necho "$*" >> "%s"\ncase "$*" in *7x100*) exit 2 ;; esac\n' % (tmp_path / "calls"))
    tune.chmod(0o755)
    (tmp_path / "pairs.txt").write_text(PAIRS)
    monkeypatch.setenv("XENT_KERNEL_CACHE", str(tmp_path / "kc"))
    assert config_pairs.compile_pairs(str(tune), config_pairs.parse_pairs(str(tmp_path / "pairs.txt"))) == 1
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == ["--compile-only --gpu h200 -q --shape 300x4096 --dtype f32 --config VEC=4 TPR=32 "
                     "--config VEC=4 TPR=64 -r none --weights",
                     "--compile-only --gpu h200 -q --shape 7x100 --dtype bf16 --config VEC=8 TPR=8 "
                     "--config VEC=8 TPR=16"]
    monkeypatch.delenv("XENT_KERNEL_CACHE")
    with pytest.raises(SystemExit):
        config_pairs.compile_pairs(str(tune), [])


K = config_pairs.knobs


@pytest.mark.parametrize("a, want", [
    ("VEC=1 TPR=4 BLOCK=128 ITEMS=16", "VEC=4 TPR=4 BLOCK=128 ITEMS=4"),  # as many elements a lane
    ("VEC=2 TPR=4 BLOCK=128 ITEMS=2", "VEC=4 TPR=4 BLOCK=128 ITEMS=1"),
    ("VEC=1 TPR=4 BLOCK=128 ITEMS=2", None),  # fewer than a vector a lane
    ("VEC=4 TPR=4 BLOCK=128 ITEMS=2", None),  # already wide
])
def test_draw_pairs_wider_vector(a, want):
    got = draw_pairs.wider_vector(K(a))
    assert got == (K(want) if want else None)


@pytest.mark.parametrize("a, want", [
    ("VEC=8 TPR=8 BLOCK=128 ITEMS=4 SPLIT=1", "VEC=8 TPR=16 BLOCK=128 ITEMS=2 SPLIT=1"),
    ("VEC=8 TPR=16 BLOCK=256 ITEMS=2 SPLIT=1", "VEC=8 TPR=32 BLOCK=256 ITEMS=1 SPLIT=1"),
    ("VEC=8 TPR=32 BLOCK=128 ITEMS=4 SPLIT=1", None),  # a team past a warp is its block
    ("VEC=8 TPR=8 BLOCK=128 ITEMS=1 SPLIT=1", None),  # no chunk to halve
    ("VEC=8 TPR=8 BLOCK=128 ITEMS=4 SPLIT=2", None),  # split rows keep their teams
])
def test_draw_pairs_wider_team(a, want):
    got = draw_pairs.wider_team(K(a))
    assert got == (K(want) if want else None)


@pytest.mark.parametrize("a, dtype, want", [
    ("VEC=2 TPR=2 BLOCK=256 ITEMS=16 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=0", "bf16",
     "VEC=8 TPR=1 BLOCK=128 ITEMS=1 PASSES=2 CACHE=2 TILE=1 SPLIT=1 PERSIST=1"),  # 16-byte vectors, A's CACHE
    ("VEC=1 TPR=4 BLOCK=128 ITEMS=16 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=3", "f32",
     "VEC=4 TPR=1 BLOCK=128 ITEMS=1 PASSES=2 CACHE=0 TILE=1 SPLIT=1 PERSIST=1"),
    ("VEC=8 TPR=1 BLOCK=128 ITEMS=1 PASSES=2 CACHE=2 TILE=1 SPLIT=1 PERSIST=0", "f16", None),  # a tile already
])
def test_draw_pairs_tile(a, dtype, want):
    assert draw_pairs.tile(K(a), dtype) == (K(want) if want else None)


@pytest.mark.parametrize("a, c, want", [
    ("VEC=8 TPR=16 BLOCK=128 ITEMS=4 TILE=0", 1199, "VEC=8 TPR=16 BLOCK=128 ITEMS=4 TILE=0 POLY=8"),
    ("VEC=8 TPR=16 BLOCK=128 ITEMS=4 TILE=0 POLY=4", 1199, None),  # a polynomial already
    ("VEC=8 TPR=16 BLOCK=128 ITEMS=4 TILE=0", 400, None),  # rows the space keeps POLY from
    ("VEC=8 TPR=16 BLOCK=128 ITEMS=1 TILE=0", 1199, None),  # a chunk of fewer than two eights
])
def test_draw_pairs_poly(a, c, want):
    assert draw_pairs.poly(K(a), c) == (K(want) if want else None)


def test_draw_pairs_blocks_and_text():
    k = K("VEC=8 TPR=4 BLOCK=128 ITEMS=8 PASSES=1 PREFETCH=0 POLY=8 FLAT=0")
    assert draw_pairs.blocks_per_sm(13183, k, 132) == pytest.approx(412 / 132)
    assert draw_pairs.text(k) == "VEC=8 TPR=4 BLOCK=128 ITEMS=8 PASSES=1 POLY=8"  # optional knobs at 0 left out
    assert config_pairs.matches(draw_pairs.text(k), "VEC=8 TPR=4 BLOCK=128 ITEMS=8 PASSES=1 PREFETCH=0 POLY=8")


def _row(n, c, dtype, red, floor, untuned, tuned, fixed=False):
    size = {"f32": 4, "f16": 2, "bf16": 2}[dtype]
    return {"name": "%dx%d %s i64 %s" % (n, c, dtype, red), "n": n, "c": c, "dtype": dtype, "reduction": red,
            "bytes": n * c * size, "fixed": fixed, "floor_us": floor, "untuned": {"us": untuned}, "tuned": {"us": tuned}}


def test_targets_lines():
    """The report's targets section: the figures docs/random-problems.md and the closing notes quote."""
    rows = [_row(100, 10, "f32", "mean", 2.0, 4.2, 4.0),             # drawn, small, within 5%
            _row(65536, 8192, "f16", "none", 100.0, 120.0, 105.0),    # drawn, 1 GB 16-bit, 1.143 untuned
            _row(100000, 1000, "f32", "mean", 88.0, 97.0, 92.4, True),  # fixed, 400 MB fp32, 1.050 tuned
            _row(32768, 4096, "f32", "mean", 100.0, 104.0, 104.0, True),
            _row(7, 1000003, "f32", "mean", 9.0, 12.6, 12.6, True)]
    got = rp.targets(rows)
    assert got[0] == "- untuned within 5% of tuned: 1 of 2; within 10%: 1; worst 1.143"
    assert got[1] == "- tuned, 64 MB or more, within 1.06x the floor: 3 of 3"
    assert got[2].startswith("- tuned fp32, 256 MB or more: 1.040-1.050x the floor (worst 100000x1000")
    assert got[2].endswith("within 1.03x: 0 of 2")
    assert got[3] == "- reference 32768x4096 f32 i64 mean: tuned 1.040x the floor"
    assert got[4] == "- few rows, huge vocabulary, 7x1000003 f32 i64 mean: tuned 1.400x the floor"


def test_pack_kernels_round_trip(tmp_path):
    """tools/pack-kernels.sh packs a kernel cache's CUBINs (and nothing else) for gpu-session.sh to unpack."""
    import subprocess
    import tarfile
    cache = tmp_path / "kc"
    cache.mkdir()
    files = {"%016x.cubin" % i: bytes([i]) * (100 + 37 * i) for i in range(5)}
    for name, data in files.items():
        (cache / name).write_bytes(data)
    (cache / "abc.cubin.tmp.1234").write_bytes(b"half written")
    out = tmp_path / "k.txz"
    r = subprocess.run(["bash", os.path.join(ROOT, "tools", "pack-kernels.sh"), str(cache), str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "5 kernels" in r.stdout
    with tarfile.open(out) as t:
        got = {m.name.lstrip("./"): t.extractfile(m).read() for m in t.getmembers()}
    assert got == files
