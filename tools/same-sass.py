#!/usr/bin/env python3
"""Whether a template change leaves the shipped entries' kernels as they were: compiles every entry of a
tune-cache export at its own problem with two builds of xent-tune (each into a kernel cache of its own,
no GPU needed) and compares the kernels' SASS (nvdisasm), matched on their rendered defines.

    tools/same-sass.py OLD_XENT_TUNE NEW_XENT_TUNE [--cache tunecache/h200.sql] [--family xent_fwd]
                       [--except FUNCTION ...]

OLD_XENT_TUNE is a build of the templates before the change (e.g. `git worktree add /tmp/old HEAD &&
make -C /tmp/old build/xent-tune`). Prints a line a kernel that differs or exists in one build only, then
the counts; exits 0 when every kernel both builds compile is the same. Entries whose kernels are the
same may be restamped rather than retuned (docs/cache.md). nvdisasm: $NVDISASM, else on PATH, else
$CUDA/bin (default /usr/local/cuda).

--except leaves out entry points no tuned plan launches (xent_grad_rescale, say): a module's other functions
are compared one by one, each with its branch labels numbered afresh, so that a change to one entry point
does not read as a change to the kernels beside it.
"""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import kcache_file

OPTIONS = [(1, ["--weights"]), (2, ["--label-smoothing", "0.1"]), (4, ["--lse"]), (16, ["--z-loss", "0.001"]),
           (32, ["--softcap", "30"])]  # TC_OPT_* bits; STRIDED (8) pads the rows, SHARD (64) is not shipped
OPS = {"xent_fwd": "forward", "xent_grad/fused": "fused", "xent_grad/bwd": "backward"}


def entry_args(e):
    args = ["--shape", "%dx%d" % (e["n"], e["c"]), "--dtype", e["dtype"], "--targets", e["targets"],
            "--reduction", e["reduction"], "--op", OPS[e["family"]], "--config", e["config"]]
    for bit, flags in OPTIONS:
        if e["options"] & bit:
            args += flags
    if e["options"] & 8:
        args += ["--row-stride", str(e["c"] + 8)]
    return args


def progress(label, done, total):
    """A line on stderr at every tenth of a long step: compiling a cache's entries takes minutes."""
    if done == total or done % max(1, total // 10) == 0:
        print("%s: %d/%d" % (label, done, total), file=sys.stderr, flush=True)


def compile_all(tune, entries, gpu, folder, label="compiled"):
    def one(e):
        env = dict(os.environ, XENT_KERNEL_CACHE=folder)
        p = subprocess.run([tune, "--compile-only", "-q", "--gpu", gpu] + entry_args(e), env=env,
                           capture_output=True, text=True)
        return None if p.returncode == 0 else "%s: %s" % (" ".join(entry_args(e)), p.stderr.strip()[-300:])
    failed = []
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
        for done, f in enumerate(concurrent.futures.as_completed([pool.submit(one, e) for e in entries]), 1):
            failed += [f.result()] if f.result() else []
            progress(label, done, len(entries))
    return failed


def kernels(folder):
    """defines -> the CUBIN of every kernel-cache file of a folder."""
    found = (kcache_file.read(os.path.join(folder, name)) for name in os.listdir(folder) if name.endswith(".cubin"))
    return dict(got for got in found if got)


def sass(nvdisasm, cubin, skip=()):
    """The SASS of each function of a CUBIN but those in skip, its labels numbered in order of appearance."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([nvdisasm, "-c", f.name], capture_output=True, text=True, check=True).stdout
    funcs = {}
    for part in re.split(r"^\s*\.section\s+", text, flags=re.M)[1:]:
        name = part.split(",", 1)[0]
        if not name.startswith(".text.") or name[len(".text."):] in skip:
            continue
        labels = {}
        funcs[name] = re.sub(r"\.L_x_\d+", lambda m: labels.setdefault(m.group(0), ".L%d" % len(labels)), part)
    if not funcs and not skip:  # a listing without sections is compared whole
        return {"": text}
    if not funcs:
        sys.exit("same-sass: no functions found in nvdisasm's listing to compare")
    return funcs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--cache", default="tunecache/h200.sql", help="an export (xent-tune export)")
    ap.add_argument("--family", default="xent_fwd", help="xent_fwd, xent_grad or all (default xent_fwd)")
    ap.add_argument("--except", dest="skip", nargs="+", default=[], metavar="FUNCTION",
                    help="entry points to leave out of the comparison")
    a = ap.parse_args()
    nvdisasm = (os.environ.get("NVDISASM") or shutil.which("nvdisasm") or
                os.path.join(os.environ.get("CUDA", "/usr/local/cuda"), "bin", "nvdisasm"))
    if not os.path.exists(nvdisasm):
        sys.exit("same-sass: no nvdisasm (set NVDISASM; pip's nvidia-cuda-nvdisasm wheel has one)")
    gpu = os.path.basename(a.cache).split(".")[0]
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "cache.db")
        subprocess.run([a.new, "import", a.cache, "--db", db], check=True, capture_output=True)
        shown = subprocess.run([a.new, "show", "--db", db, "--json"], check=True, capture_output=True, text=True)
        entries = [e for e in json.loads(shown.stdout)["entries"]
                   if a.family == "all" or e["family"].split("/")[0] == a.family]
        found = {}
        for label, tune in (("old", a.old), ("new", a.new)):
            folder = os.path.join(tmp, label)
            os.mkdir(folder)
            failed = compile_all(tune, entries, gpu, folder, "%s: compiled" % label)
            for f in failed:
                print("%s build failed: %s" % (label, f))
            found[label] = kernels(folder)
            print("%s: %d entries, %d kernels" % (label, len(entries), len(found[label])), file=sys.stderr)
    old, new = found["old"], found["new"]
    both = sorted(set(old) & set(new))
    differ = []
    for done, k in enumerate(both, 1):
        if sass(nvdisasm, old[k], a.skip) != sass(nvdisasm, new[k], a.skip):
            differ.append(k)
        progress("compared", done, len(both))
    for k in differ:
        print("differs:", k.replace("\n", " ").strip())
    for label, only in (("old", set(old) - set(new)), ("new", set(new) - set(old))):
        for k in sorted(only):
            print("only %s:" % label, k.replace("\n", " ").strip())
    same = len(set(old) & set(new)) - len(differ)
    print("%d kernels the same, %d differ, %d only old, %d only new" %
          (same, len(differ), len(set(old) - set(new)), len(set(new) - set(old))))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
