#!/usr/bin/env bash
# One call on the GPU machine: run the named stages, logs under $OUT.
#   tools/gpu-session.sh test crosscheck tune exhaustive sweep bench
# The build folder is made on the dev machine and carried (device tool).
set -uo pipefail
OUT=${OUT:-/tmp/xent-out}
mkdir -p "$OUT"
export XENT_KERNEL_CACHE=${XENT_KERNEL_CACHE:-/tmp/xent-kernels}
export XENT_TUNECACHE=${XENT_TUNECACHE:-$OUT/tune.db}
export XENT_DATADIR=${XENT_DATADIR:-$PWD/tunecache}
export PYTHONUNBUFFERED=1
TUNE=build/xent-tune
BENCH_SHAPES="32768x4096 4096x32000 8192x128256 16384x50257 64x262144 1048576x10"
BF16_SHAPES="32768x4096 8192x128256"
status=0

stage() { echo; echo "=== $1 ($(date -u +%H:%M:%S))"; }
run() { "$@" || { echo "FAILED($?): $*"; status=1; }; }

for s in "$@"; do
    case $s in
    info)
        stage info
        nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv | tee "$OUT/gpu.txt" ;;
    test)
        # the binaries make test-gpu runs; make itself would try to rebuild here
        stage "GPU suite"
        for t in build/tests/gpu/check_*; do run timeout "${TEST_TIMEOUT:-400}" "$t"; done 2>&1 | tee "$OUT/test-gpu.log" ;;
    crosscheck)
        stage "PyTorch cross-check"
        run python3 tests/gpu/torch_crosscheck.py 2>&1 | tee "$OUT/crosscheck.log" ;;
    tune)
        stage "tune the benchmark shapes"
        for sh in $BENCH_SHAPES; do run $TUNE --gpu h200 --shape "$sh" -q; done 2>&1 | tee "$OUT/tune.log"
        for sh in $BF16_SHAPES; do run $TUNE --gpu h200 --shape "$sh" --dtype bf16 -q; done 2>&1 | tee -a "$OUT/tune.log" ;;
    exhaustive)
        stage "staged search vs exhaustive"
        for sh in ${EXHAUSTIVE_SHAPES:-32768x4096 64x262144 1048576x10}; do
            run $TUNE --gpu h200 --shape "$sh" -q --db "$OUT/exhaustive.db" --exhaustive --top 3
        done 2>&1 | tee "$OUT/exhaustive.log" ;;
    sweep)
        stage "sweep for the shipped cache"
        run $TUNE --gpu h200 --shapes-file tunecache/sweep-shapes.txt --budget "${SWEEP_BUDGET:-10}" -q --top 1 \
            2>&1 | tee "$OUT/sweep.log"
        run $TUNE --gpu h200 --shapes-file tunecache/sweep-shapes-16bit.txt --dtype bf16 --budget "${SWEEP_BUDGET:-10}" -q --top 1 \
            2>&1 | tee -a "$OUT/sweep.log" ;;
    export)
        stage "export"
        run $TUNE export --gpu h200 --output "$OUT/h200.sql" ;;
    bench)
        stage "benchmark"
        run python3 bench/bench.py --out "$OUT" 2>&1 | tee "$OUT/bench.log" ;;
    *) echo "unknown stage $s"; status=2 ;;
    esac
done
exit $status
