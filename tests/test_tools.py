"""CPU tests of the kernel-cache tools in tools/: recompile-kernels.py makes a folder compiled ahead
again from its kernels' defines; same-sass.py matches two folders' kernels on them; ab-build.sh
compiles an A/B file's configs ahead with each build it makes, and every patch bench/ab holds applies.

    python3 -m pytest -q tests/test_tools.py      (after make: it runs build/xent-tune)

No GPU: the kernels are compiled by `xent-tune --compile-only`.
"""
import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUNE = os.path.join(ROOT, "build", "xent-tune")
sys.path.insert(0, os.path.join(ROOT, "tools"))  # the tools' shared reader, kcache_file


def load(name):
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), os.path.join(ROOT, "tools", name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


recompile = load("recompile-kernels")
same_sass = load("same-sass")
needs_tune = pytest.mark.skipif(not os.access(TUNE, os.X_OK), reason="build/xent-tune not built (make)")

# one kernel of each kind the tools must take back: split rows, a compiled-in class count with a
# tile and the options, a one-block launch, the training family's fused kernel
KINDS = [
    (["--shape", "8x100000", "--dtype", "f32"],
     "VEC=4 TPR=128 BLOCK=128 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=8 PERSIST=0"),
    (["--shape", "3000x20", "--dtype", "bf16", "--targets", "i32", "--reduction", "sum", "--weights",
      "--label-smoothing", "0.1", "--lse"], "VEC=2 TPR=1 BLOCK=128 ITEMS=1 PASSES=2 CACHE=0 TILE=1 SPLIT=1 PERSIST=0"),
    (["--shape", "2x500", "--dtype", "f16"],
     "VEC=8 TPR=32 BLOCK=128 ITEMS=2 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1"),
    (["--shape", "300x4096", "--dtype", "bf16", "--op", "fused"],
     "VEC=8 TPR=32 BLOCK=256 ITEMS=16 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0"),
]


def compile_into(folder, kind, config):
    env = dict(os.environ, XENT_KERNEL_CACHE=str(folder))
    p = subprocess.run([TUNE, "--compile-only", "-q", "--gpu", "h200"] + kind + ["--config", config], env=env,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def defines(folder):
    return {recompile.defines_of(os.path.join(folder, f))[0] for f in os.listdir(folder) if f.endswith(".cubin")}


@needs_tune
def test_a_folder_is_made_again_kernel_for_kernel(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    for kind, config in KINDS:
        compile_into(old, kind, config)
    want = defines(old)
    assert len(want) == len(KINDS)
    assert any("#define XENT_ONE_BLOCK 1\n" in d for d in want)  # 2 rows, 4 teams a block
    assert any("#define XENT_EDGES_ONCE 1\n" in d for d in want)  # rows of 500 f16 classes end off 8
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "recompile-kernels.py"), str(old), str(new),
                        "--tune", TUNE], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "%d of %d kernels made again" % (len(KINDS), len(KINDS)) in p.stdout
    assert defines(new) == want
    # the kernels match on their defines: what same-sass.py compares
    assert set(same_sass.kernels(str(old))) == set(same_sass.kernels(str(new))) == want


@pytest.mark.parametrize("given, kind, config", [
    ({"VEC": 4, "TPR": 32, "BLOCK": 128, "ITEMS": 8, "PASSES": 1, "CACHE": 0, "TILE": 0, "POLY": 0, "SEGMENTED": 1,
      "LOGIT": 0, "TARGET": 1, "REDUCTION": 2, "WEIGHTS": 0, "SMOOTHING": 0, "LSE": 0},
     ["--shape", "4096x100000", "--dtype", "f32", "--targets", "i64", "--reduction", "mean"],
     "VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=2 PERSIST=0 POLY=0"),
    ({"VEC": 8, "TPR": 8, "BLOCK": 128, "ITEMS": 2, "PASSES": 2, "CACHE": 1, "TILE": 0, "POLY": 0, "SEGMENTED": 0,
      "LOGIT": 1, "TARGET": 0, "REDUCTION": 1, "WEIGHTS": 1, "SMOOTHING": 1, "LSE": 1, "C": 77, "ONE_BLOCK": 1},
     ["--shape", "1x77", "--dtype", "f16", "--targets", "i32", "--reduction", "sum", "--weights",
      "--label-smoothing", "0.1", "--lse"],
     "VEC=8 TPR=8 BLOCK=128 ITEMS=2 PASSES=2 CACHE=1 TILE=0 SPLIT=1 PERSIST=0 POLY=0"),
    ({"VEC": 8, "TPR": 32, "BLOCK": 128, "ITEMS": 2, "PASSES": 1, "CACHE": 0, "TILE": 0, "POLY": 0, "SEGMENTED": 0,
      "LOGIT": 1, "TARGET": 1, "REDUCTION": 2, "WEIGHTS": 0, "SMOOTHING": 0, "LSE": 0, "ONE_BLOCK": 1,
      "EDGES_ONCE": 1},
     ["--shape", "1x4096", "--dtype", "f16", "--targets", "i64", "--reduction", "mean", "--row-stride", "4097"],
     "VEC=8 TPR=32 BLOCK=128 ITEMS=2 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0 POLY=0"),
    ({"VEC": 4, "TPR": 512, "BLOCK": 512, "ITEMS": 16, "CACHE": 0, "SPLIT": 1, "PREFETCH": 2, "POLY": 0, "EVICT": 0,
      "STASH": 1, "FLAT": 0, "MODE": 1, "ZLOSS": 1, "SOFTCAP": 0, "SHARD": 0, "LOGIT": 0, "TARGET": 1, "REDUCTION": 2,
      "WEIGHTS": 0, "SMOOTHING": 0, "LSE": 0},
     ["--shape", "4096x50257", "--dtype", "f32", "--targets", "i64", "--reduction", "mean", "--op", "fused",
      "--z-loss", "0.001"],
     "VEC=4 TPR=512 BLOCK=512 ITEMS=16 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0 PREFETCH=2 POLY=0 EVICT=0 STASH=1 "
     "FLAT=0"),
    ({"VEC": 4, "TPR": 256, "BLOCK": 256, "ITEMS": 8, "CACHE": 0, "SPLIT": 1, "PREFETCH": 0, "POLY": 0, "EVICT": 0,
      "STASH": 0, "FLAT": 0, "MODE": 0, "ZLOSS": 0, "SOFTCAP": 0, "SHARD": 1, "LOGIT": 0, "TARGET": 1, "REDUCTION": 2,
      "WEIGHTS": 0, "SMOOTHING": 0, "LSE": 0}, None, None),  # a shard: left to the GPU machine
])
def test_defines_give_back_a_problem_and_config(given, kind, config):
    got = recompile.kind_and_config(given)
    if kind is None:
        assert got is None
    else:
        assert got == (tuple(kind), config)


@needs_tune
@pytest.mark.parametrize("key, imported", [(None, True), ("h100", False)])
def test_gpu_session_imports_and_exports_its_key(tmp_path, key, imported):
    """tools/gpu-session.sh's import and export stages act on GPU_KEY's cache (default h200): the
    shipped h200 entries come back whole, and a key with no shipped file imports nothing, without
    failing the stage."""
    env = dict(os.environ, OUT=str(tmp_path / "out"), XENT_TUNECACHE=str(tmp_path / "tune.db"),
               XENT_KERNEL_CACHE=str(tmp_path / "kc"))
    env.pop("GPU_KEY", None)
    if key:
        env["GPU_KEY"] = key
    p = subprocess.run(["bash", "tools/gpu-session.sh", "import"] + (["export"] if imported else []), cwd=ROOT,
                       env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert ("imported" in p.stdout) == imported
    if imported:
        shipped = [ln for ln in open(os.path.join(ROOT, "tunecache", "h200.sql")) if ln.startswith("INSERT")]
        exported = [ln for ln in open(tmp_path / "out" / "h200.sql") if ln.startswith("INSERT")]
        assert sorted(exported) == sorted(shipped)


def _recording_stub(path, calls):
    """An executable at path that appends its arguments, a line a call, to calls."""
    path.write_text('#!/bin/sh\necho "$@" >> "%s"\n' % calls)
    path.chmod(0o755)
    return path


def test_gpu_session_tunes_with_tune_bin(tmp_path):
    """TUNE_BIN names the xent-tune of the tuning stages (a variant's, whose template stamps the
    entries): the gradtune and export stages call it, not build/xent-tune."""
    stub = _recording_stub(tmp_path / "xent-tune", tmp_path / "calls")
    env = dict(os.environ, OUT=str(tmp_path / "out"), TUNE_BIN=str(stub), XENT_KERNEL_CACHE=str(tmp_path / "kc"),
               GRAD_SHAPES="64x1000:bf16", GRAD_OPS="fused")
    env.pop("GPU_KEY", None)
    p = subprocess.run(["bash", "tools/gpu-session.sh", "gradtune", "export"], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    calls = open(tmp_path / "calls").read().splitlines()
    assert calls[0].startswith("import tunecache/h200.sql")
    assert any(c.startswith("--gpu h200 --shape 64x1000 --dtype bf16 --op fused --budget") for c in calls), calls
    assert calls[-1] == "export --gpu h200 --output %s" % (tmp_path / "out" / "h200.sql")


def test_gpu_session_random_stages_report_apart(tmp_path):
    """A second random stage in one call reports into $OUT/random-2, so that "random retune random"
    keeps the draw before the retune beside the one after (python3 stands in for the benchmark)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _recording_stub(bin_dir / "python3", tmp_path / "calls")
    env = dict(os.environ, OUT=str(tmp_path / "out"), PATH="%s:%s" % (bin_dir, os.environ["PATH"]),
               XENT_KERNEL_CACHE=str(tmp_path / "kc"), RANDOM_ONLY="14,35", RANDOM_BUDGET="0")
    p = subprocess.run(["bash", "tools/gpu-session.sh", "random", "random"], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    outs = [ln.split("--out ")[1].strip() for ln in open(tmp_path / "calls")]
    assert outs == [str(tmp_path / "out" / "random"), str(tmp_path / "out" / "random-2")]
    assert all("--only 14,35" in ln and "--no-tune" in ln for ln in open(tmp_path / "calls"))


@needs_tune
def test_gpu_session_ship_returns_its_cache_after_each_part(tmp_path):
    """The ship stage copies its cache to $OUT/ship.db after each part, so that a call cut off by
    its limit returns the parts it finished; an unknown part is reported and fails the stage."""
    db = tmp_path / "ship.db"
    subprocess.run([TUNE, "import", os.path.join(ROOT, "tunecache", "h200.sql"), "--db", str(db)], check=True,
                   capture_output=True)
    env = dict(os.environ, OUT=str(tmp_path / "out"), SHIP_DB=str(db), SHIP_PARTS="no-such-part",
               XENT_TUNECACHE=str(tmp_path / "tune.db"), XENT_KERNEL_CACHE=str(tmp_path / "kc"))
    env.pop("GPU_KEY", None)
    p = subprocess.run(["bash", "tools/gpu-session.sh", "ship"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert p.returncode != 0
    assert "FAILED: unknown ship part 'no-such-part'" in p.stdout
    assert (tmp_path / "out" / "ship.db").read_bytes() == db.read_bytes()


@needs_tune
def test_ab_build_compiles_an_ab_files_configs_ahead(tmp_path):
    """tools/ab-build.sh with AB_CONFIGS compiles each line's config, with the line's flags, by the
    build it makes into XENT_KERNEL_CACHE, and says which lines that build refuses."""
    ab = tmp_path / "ab.txt"
    held = "VEC=8 TPR=32 BLOCK=256 ITEMS=16 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0"
    ab.write_text("# a comment, then a blank line\n\n"
                  "300x4096 bf16 %s\n"
                  "300x4096 bf16 %s PREFETCH=9\n"
                  "300x4096 bf16 %s -- --label-smoothing 0.1 --weights\n" % (held, held, held))
    env = dict(os.environ, XENT_KERNEL_CACHE=str(tmp_path / "kc"), AB_OP="fused", AB_CONFIGS=str(ab),
               AB_OUT=str(tmp_path / "variants"))
    p = subprocess.run(["bash", "tools/ab-build.sh", "head=HEAD"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert os.access(tmp_path / "variants" / "head" / "xent-tune", os.X_OK)
    refused = [ln for ln in p.stderr.splitlines() if "not compiled" in ln]
    assert refused == ["head: not compiled: 300x4096 bf16 %s PREFETCH=9" % held]
    got = defines(tmp_path / "kc")
    assert len(got) == 2  # the plain kernel and the one with smoothing and weights
    assert sum("XENT_SMOOTHING 1" in d and "XENT_WEIGHTS 1" in d for d in got) == 1


# same-sass.py's comparison of two listings, function by function: nvdisasm stood in for by a script that
# prints its file, each "CUBIN" the listing itself. A function's section: its name, then its code with
# branch labels.
@pytest.fixture
def listing_tool(tmp_path):
    tool = tmp_path / "nvdisasm"
    tool.write_text('#!/bin/sh\nexec cat "$2"\n')  # called as nvdisasm -c FILE
    tool.chmod(0o755)
    return str(tool)


def listing(*funcs):
    return "".join('\t.section\t.text.%s,"ax",@progbits\n%s\n' % f for f in funcs).encode()


ROWS = ("xent_grad", "BRA `(.L_x_3) ;\n.L_x_3:\nEXIT ;")
ROWS_RENUMBERED = ("xent_grad", "BRA `(.L_x_17) ;\n.L_x_17:\nEXIT ;")
ROWS_CHANGED = ("xent_grad", "BRA `(.L_x_3) ;\n.L_x_3:\nNOP ;\nEXIT ;")
RESCALE = ("xent_grad_rescale", "LDG.E.U16 R0 ;\n.L_x_1:\nEXIT ;")
RESCALE_CHANGED = ("xent_grad_rescale", "LDG.E.128 R0 ;\n.L_x_1:\nEXIT ;")


@pytest.mark.parametrize("old, new, skip, same", [
    (listing(RESCALE, ROWS), listing(RESCALE, ROWS), (), True),
    (listing(RESCALE, ROWS), listing(RESCALE_CHANGED, ROWS), (), False),  # the whole module counts
    (listing(RESCALE, ROWS), listing(RESCALE_CHANGED, ROWS), ("xent_grad_rescale",), True),
    (listing(RESCALE, ROWS), listing(RESCALE_CHANGED, ROWS_CHANGED), ("xent_grad_rescale",), False),
    (listing(RESCALE, ROWS), listing(RESCALE, ROWS_RENUMBERED), (), True),  # labels are names, not code
    (b"EXIT ;\n", b"NOP ;\nEXIT ;\n", (), False),  # no sections: compared whole
])
def test_listings_compare_function_by_function(listing_tool, old, new, skip, same):
    assert (same_sass.sass(listing_tool, old, skip) == same_sass.sass(listing_tool, new, skip)) == same


def test_no_function_left_to_compare_stops(listing_tool):
    with pytest.raises(SystemExit):
        same_sass.sass(listing_tool, b"EXIT ;\n", ("xent_grad_rescale",))


IN_GIT = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=ROOT, capture_output=True).returncode == 0
PATCHES = sorted(f for f in os.listdir(os.path.join(ROOT, "bench", "ab")) if f.endswith(".patch"))


@pytest.mark.skipif(not IN_GIT, reason="not a git checkout")
@pytest.mark.parametrize("patch", PATCHES)
def test_ab_patch_applies_to_the_tree(patch):
    """Every experiment waiting in bench/ab applies to the templates as they are (ab-build.sh applies it
    to HEAD): a change that moves the lines a patch touches must carry the patch along."""
    p = subprocess.run(["git", "apply", "--check", os.path.join("bench", "ab", patch)], cwd=ROOT,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
