#!/usr/bin/env python3
"""ncu_profile.py — launch xent's plan for one shape a few times, then the
streaming read over the same bytes, so that Nsight Compute can read the
hardware counters of both kernels (bench/ab/log.md, "What the gaps are
made of"). The third xent launch and the first read are the ones to profile:

    ncu --clock-control none -k regex:'xent_fwd|stream_read' --launch-skip 2 \\
        --launch-count 2 --section SpeedOfLight ... python3 bench/ncu_profile.py 32768x4096:bf16

The same inputs and plan source as bench.py (the shipped cache unless
XENT_DATADIR or XENT_TUNECACHE say otherwise).
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shape", help="NxC[:dtype], as bench.py --shapes takes")
    ap.add_argument("--launches", type=int, default=3, help="launches of each kernel")
    args = ap.parse_args()
    shape = bench.parse_shape(args.shape)
    env = bench.Env(argparse.Namespace(dist="rand", head_start=False))
    L, T = bench.make_inputs(env, shape, 1, "rand")
    xent = bench.setup_xent(env, L, T, shape)
    for _ in range(args.launches):
        xent.fns[0]()
    env.torch.cuda.synchronize()
    # the read's first launch comes next (8 blocks per SM), then its grid search
    read = bench.setup_read(env, L, T, shape)
    env.torch.cuda.synchronize()
    bench.log("profiled %s: xent %s; read %s" % (shape["name"], xent.info["config"], read.notes[-1]))

if __name__ == "__main__":
    main()
