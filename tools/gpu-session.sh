#!/usr/bin/env bash
# One call on the GPU machine: run the named stages in order.
#   tools/gpu-session.sh info test configs crosscheck tune example exhaustive explore profile import sweep export bench ab
#   copy grad gradtune py gradprofile random pairs threads sanitize faults vocabpar ship retune
# Everything is logged to $OUT/session.log; the shipped cache export goes to
# $OUT/$GPU_KEY.sql and the benchmark to $OUT/bench/ (the device tool returns at
# most 8 files). The build folder is made on the dev machine (make gpu-bins) and carried.
# Stage times on the H200: test ~2.5 min, configs ~6.5 min for fp32 (every 3rd
# config: 134 s) and ~15 min a 16-bit dtype (every 12th: 70-80 s), so one dtype
# or one part a call (SWEEP_DTYPES; XENT_TEST_EVERY=k with XENT_TEST_OFFSET=0..k-1
# covers it in k calls), crosscheck ~1 min,
# tune ~1.5 min, exhaustive 10-25 s a shape, sweep ~2.5 min at SWEEP_BUDGET=3,
# bench ~1.5 min; random ~3-4 min untuned (RANDOM_BUDGET=0), ~45 s a problem at
# RANDOM_BUDGET=30 (estimates); a call has 10 min. XENT_TEST_EVERY=k runs every k-th config.
set -uo pipefail
OUT=${OUT:-/tmp/xent-out}
mkdir -p "$OUT"
LOG=$OUT/session.log
export XENT_KERNEL_CACHE=${XENT_KERNEL_CACHE:-/tmp/xent-kernels}
export XENT_TUNECACHE=${XENT_TUNECACHE:-/tmp/xent-tune.db}
export PYTHONUNBUFFERED=1
. "$(dirname "$0")/ab-lines.sh"   # the ab stage's configs file
# xent-tune, the example and libxent.so record no RUNPATH (docs/design.md):
# NVRTC is found here even where the loader's configuration lacks CUDA's folder
export LD_LIBRARY_PATH=${CUDA:-/usr/local/cuda}/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# TUNE_BIN: another build's xent-tune (a variant of tools/ab-build.sh) for every stage that tunes
# or exports, so that a template change's entries are tuned by its own template before it lands
TUNE=${TUNE_BIN:-build/xent-tune}
# the GPU whose cache the tuning stages write and export (tunecache/$GPU_KEY.sql, $OUT/$GPU_KEY.sql):
# the shipped h200 by default; another key of xent-tune --gpu (h100, say) builds that GPU's own cache
GPU_KEY=${GPU_KEY:-h200}
# the shipped entries of $GPU_KEY into a cache (default the session's), where there are any, so that an
# export keeps the entries not retuned here
import_shipped() { [ ! -f "tunecache/$GPU_KEY.sql" ] || run $TUNE import "tunecache/$GPU_KEY.sql" "$@"; }
# the shapes the tune stage retunes (by default the benchmark's)
TUNE_SHAPES=${TUNE_SHAPES-32768x4096 4096x32000 8192x128256 16384x50257 64x262144 1048576x10}
TUNE_BF16_SHAPES=${TUNE_BF16_SHAPES-32768x4096 8192x128256}
status=0

stage() { echo; echo "=== $1 ($(date -u +%H:%M:%S))"; }
run() { "$@" || { echo "FAILED($?): $*"; status=1; }; }

{
# kernels compiled ahead on the build machine (docs/tuning.md, "Compiling ahead"), so that tunes
# spend their budget timing; the key of each file names its template, architecture and NVRTC
# (once per pack: a later call on the same warm machine finds the stamp and skips it)
stamp="$XENT_KERNEL_CACHE/.unpacked-$(cksum build/kernels.txz 2>/dev/null | cut -d' ' -f1)"
if [ -f build/kernels.txz ] && [ ! -f "$stamp" ]; then
    mkdir -p "$XENT_KERNEL_CACHE"
    if tar -xJf build/kernels.txz -C "$XENT_KERNEL_CACHE" 2>/dev/null ||
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
            build/kernels.txz "$XENT_KERNEL_CACHE"; then touch "$stamp"
    else echo "FAILED: unpacking build/kernels.txz"; status=1; fi
    echo "kernel cache $XENT_KERNEL_CACHE: $(ls "$XENT_KERNEL_CACHE" | wc -l) kernels"
fi
for s in "$@"; do
    case $s in
    info)
        stage info
        nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv
        # the build's own record: this copy's git metadata may be older than the carried tree
        echo "build of commit $(cat build/COMMIT 2>/dev/null || echo unknown)" ;;
    test)
        # the binaries make test-gpu runs (make itself would try to rebuild
        # here), all but the sweep of every config: see the configs stage
        stage "GPU suites but the config sweep"
        run timeout "${TEST_TIMEOUT:-900}" build/tests/gpu/check_tune
        CK_EXCLUDE_TAGS=sweep run timeout "${TEST_TIMEOUT:-900}" build/tests/gpu/check_gpu ;;
    configs)
        # every config of the space, for the dtypes in SWEEP_DTYPES (default
        # all three: 2187 fp32 configs, 5589 a 16-bit dtype, each compiled and
        # run on two problems; XENT_TEST_EVERY and XENT_TEST_OFFSET pick a part)
        stage "config sweep ${SWEEP_DTYPES:-f32,f16,bf16}"
        CK_INCLUDE_TAGS=sweep XENT_TEST_SWEEP_DTYPES="${SWEEP_DTYPES:-f32,f16,bf16}" \
            run timeout "${TEST_TIMEOUT:-900}" build/tests/gpu/check_gpu ;;
    crosscheck)
        stage "PyTorch cross-check"
        run python3 tests/gpu/torch_crosscheck.py ;;
    tune)
        stage "tune the benchmark shapes"
        # from the shipped entries, so that export keeps the ones not retuned here
        import_shipped
        for sh in $TUNE_SHAPES; do run $TUNE --gpu "$GPU_KEY" --shape "$sh" --budget "${TUNE_BUDGET:-10}" -q --top "${TUNE_TOP:-3}"; done
        # 16-bit structures compile slowly: at --budget 8 on a cold kernel cache their
        # first stage used it all and no variant (POLY among them) was ever timed
        for sh in $TUNE_BF16_SHAPES; do run $TUNE --gpu "$GPU_KEY" --shape "$sh" --dtype bf16 --budget "${TUNE_BF16_BUDGET:-40}" -q --top "${TUNE_TOP:-3}"; done ;;
    exhaustive)
        stage "staged search vs exhaustive (a separate cache)"
        for sh in ${EXHAUSTIVE_SHAPES:-32768x4096 64x262144 1048576x10}; do
            run $TUNE --gpu "$GPU_KEY" --shape "$sh" -q --db /tmp/xent-exhaustive.db --exhaustive --top 3
        done ;;
    explore)
        # open performance questions (docs/performance.md): what the fused mean
        # costs at the reference shape, and bf16 against a row-losses-only kernel
        stage "explore"
        for red in none mean; do
            for sh in ${EXPLORE_SHAPES:-32768x4096 4096x32000 1048576x10 64x262144}; do
                run $TUNE --gpu "$GPU_KEY" --shape "$sh" --reduction $red --budget 6 -q --top 3 --db /tmp/xent-explore.db
            done
            run $TUNE --gpu "$GPU_KEY" --shape 32768x4096 --dtype bf16 --reduction $red --budget 6 -q --top 3 --db /tmp/xent-explore.db
        done ;;
    profile)
        # hardware counters of xent's shipped plan (or PROFILE_TUNECACHE's) and
        # of the streaming read over the same bytes (bench/ncu_profile.py);
        # PROFILE_TUNE_BUDGET=S tunes each shape first (S seconds, i64 targets,
        # mean) into PROFILE_TUNECACHE (default /tmp/xent-profile.db) and
        # profiles that plan: a problem's own tune, not the nearest entry's
        stage "profile (Nsight Compute)"
        if [ -n "${PROFILE_TUNE_BUDGET:-}" ]; then
            PROFILE_TUNECACHE=${PROFILE_TUNECACHE:-/tmp/xent-profile.db}
            for sh in ${PROFILE_SHAPES:-}; do
                dt=f32; [ "$sh" = "${sh%:*}" ] || dt=${sh#*:}
                run $TUNE --shape "${sh%:*}" --dtype "$dt" --budget "$PROFILE_TUNE_BUDGET" \
                    --db "$PROFILE_TUNECACHE" -q --top 3
            done
        fi
        for sh in ${PROFILE_SHAPES:-32768x4096 32768x4096:bf16 1048576x10 4096x32000 8192x128256:bf16}; do
            echo "--- $sh" >> "$OUT/profile.txt"
            XENT_TUNECACHE=${PROFILE_TUNECACHE:-/nonexistent} run timeout 120 ncu --clock-control none -k 'regex:xent_fwd|stream_read' \
                --launch-skip 2 --launch-count 2 --section SpeedOfLight --section ComputeWorkloadAnalysis \
                --section WarpStateStats --section Occupancy --section LaunchStats \
                --metrics sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active \
                python3 bench/ncu_profile.py "$sh" >> "$OUT/profile.txt" 2>&1
        done
        grep -E "^---|xent_fwd|stream_read|Duration|DRAM Throughput|Memory Throughput|pipe_xu|pipe_fma|issue_active|Achieved Occupancy" "$OUT/profile.txt" ;;
    example)
        # the C API end to end, from the tune cache the tune stage filled
        stage "C example"
        run build/xent-example ;;
    import)
        # the shipped entries into the session cache, so that an export after a
        # sweep of some sets keeps the rest
        stage "import the shipped cache"
        import_shipped ;;
    sweep)
        # SWEEP_SETS: f32 (sweep-shapes.txt), bf16 or f16 (sweep-shapes-16bit.txt),
        # each optionally of another problem kind: DTYPE:KIND with KIND none, sum,
        # i32, smoothing or weights (e.g. "bf16:none f32:smoothing"); run import
        # first when the sweep covers part of the sets only
        stage "sweep for the shipped cache (${SWEEP_SETS:-f32 bf16})"
        for set in ${SWEEP_SETS:-f32 bf16}; do
            dt=${set%%:*}; kind=${set#"$dt"}; kind=${kind#:}
            file=tunecache/sweep-shapes.txt; [ "$dt" = f32 ] || file=tunecache/sweep-shapes-16bit.txt
            case $kind in
                "") flags=() ;; none|sum) flags=(--reduction "$kind") ;; i32) flags=(--targets i32) ;;
                smoothing) flags=(--label-smoothing 0.1) ;; weights) flags=(--weights) ;;
                *) echo "FAILED: unknown sweep kind '$kind'"; status=1; continue ;;
            esac
            run $TUNE --gpu "$GPU_KEY" --shapes-file $file --dtype "$dt" "${flags[@]}" --budget "${SWEEP_BUDGET:-6}" -q --top 1
        done ;;
    retune)
        # shipped entries of GPU_KEY tuned again on that GPU (RETUNE: SHAPE:DTYPE:REDUCTION:BUDGET ...)
        # in a copy of the shipped cache, exported to $OUT/$GPU_KEY.sql and put in tunecache/$GPU_KEY.sql,
        # so that a later stage of the call (random, bench) looks up the retuned entries
        stage "retune ${RETUNE:?RETUNE names the entries, e.g. 1x2:bf16:mean:8}"
        if ! nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -qi "$GPU_KEY"; then
            echo "FAILED: retune writes the $GPU_KEY cache: this GPU is not one"; status=1; continue
        fi
        db=/tmp/xent-retune.db
        rm -f "$db"
        import_shipped --db "$db"
        for e in $RETUNE; do
            IFS=: read -r sh dt red budget <<< "$e"
            run $TUNE --gpu "$GPU_KEY" --db "$db" --shape "$sh" --dtype "$dt" --reduction "$red" --budget "$budget" -q --top 1
        done
        run $TUNE export --gpu "$GPU_KEY" --db "$db" --output "$OUT/$GPU_KEY.sql" && cp "$OUT/$GPU_KEY.sql" tunecache/$GPU_KEY.sql ;;
    export)
        stage "export"
        run $TUNE export --gpu "$GPU_KEY" --output "$OUT/$GPU_KEY.sql" ;;
    copy)
        # the training floor: whether the device copy runs on the SMs, and how close
        # copy kernels come to it (bench/copy_floor.py; COPY_SHAPES, default its four)
        stage "copy floor"
        run python3 bench/copy_floor.py ${COPY_SHAPES:-} | tee "$OUT/copy.txt" ;;
    grad)
        # the training ops against the float64 reference, then the time of the
        # fused, backward and rescale plans beside a device copy (GRAD_CONFIGS: more
        # configs to time, ';'-separated; GRAD_SUITE: another build's check_grad).
        # The plans are the session cache's (a gradtune before this stage), else this
        # checkout's shipped ones: a fresh machine has no installed data folder, and would
        # time the heuristic. The ops take about 7 s a case (a context and compiles each),
        # past 7 minutes for all: XENT_TEST_ONLY=text (fused, handoff, backward, flat,
        # rescale, shard, ...) runs a part, CK_EXCLUDE_TAGS=perf leaves the timing out.
        # GRAD_PARTS=k runs the ops as k processes at once (XENT_TEST_EVERY=k, each
        # XENT_TEST_OFFSET; their time is mostly the CPU's reference), then the timing alone
        stage "training ops${GRAD_PARTS:+ in $GRAD_PARTS parts}"
        suite=${GRAD_SUITE:-build/tests/gpu/check_grad}
        genv=(env XENT_DATADIR="${XENT_DATADIR:-$PWD/tunecache}" XENT_GRAD_CONFIGS="${GRAD_CONFIGS:-}")
        if [ "${GRAD_PARTS:-1}" -gt 1 ]; then
            pids=()
            for o in $(seq 0 $((GRAD_PARTS - 1))); do
                "${genv[@]}" XENT_TEST_EVERY="$GRAD_PARTS" XENT_TEST_OFFSET="$o" CK_EXCLUDE_TAGS=perf \
                    timeout "${TEST_TIMEOUT:-900}" "$suite" > "/tmp/xent-grad-part$o.log" 2>&1 &
                pids+=($!)
            done
            # each part's pid, not a bare wait: that would wait for the log's tee as well
            for o in "${!pids[@]}"; do
                wait "${pids[$o]}"; rc=$?
                cat "/tmp/xent-grad-part$o.log"
                [ $rc = 0 ] || { echo "FAILED($rc): check_grad part $o"; status=1; }
            done
            [ "${CK_EXCLUDE_TAGS:-}" = perf ] ||
                run "${genv[@]}" CK_INCLUDE_TAGS=perf timeout "${TEST_TIMEOUT:-900}" "$suite"
        else
            run "${genv[@]}" timeout "${TEST_TIMEOUT:-900}" "$suite"
        fi ;;
    gradtune)
        stage "tune the training ops"
        # from the shipped entries, so that export keeps the ones not retuned here
        # GRAD_EXHAUSTIVE=1 times every candidate (138-282 a shape) instead of a budget's share
        import_shipped
        search=(--budget "${GRAD_BUDGET:-20}"); [ "${GRAD_EXHAUSTIVE:-0}" = 1 ] && search=(--exhaustive)
        for sh in ${GRAD_SHAPES:-32768x4096:f32 32768x4096:bf16 16384x50257:f32 8192x128256:bf16}; do
            for op in ${GRAD_OPS:-fused backward}; do
                run $TUNE --gpu "$GPU_KEY" --shape "${sh%%:*}" --dtype "${sh##*:}" --op $op "${search[@]}" -q \
                    --top "${TUNE_TOP:-3}"
            done
        done ;;
    ship)
        # tunecache/$GPU_KEY.sql from nothing, into a cache of its own (SHIP_DB), with
        # the budgets docs/cache.md gives each part: the sweeps (fp32, bf16 and f16
        # mean; fp32 and bf16 none), the benchmark shapes, the training entries; then
        # the export ($OUT/$GPU_KEY.sql) and, for the h200, the heuristic's table derived
        # from it ($OUT/heuristic-table.c, for the markers in gen/heuristic.c). About 30
        # minutes on an H200, more than one call of the device tool, so it also runs
        # by parts: SHIP_PARTS names some of f32 bf16 f16 f32:none bf16:none bench
        # train and adds them to SHIP_DB as it is (all parts start it from nothing);
        # the cache is copied to $OUT/ship.db after each part, to carry into the next call's SHIP_DB.
        # SHIP_BUDGET replaces the sweeps' budgets (a large one, e.g. 600, times every
        # variant: no stage left unreached); SHIP_EVERY=k with SHIP_OFFSET=0..k-1 takes
        # every k-th shape of the sweeps' files, so that a part fits a call
        stage "the shipped cache (${SHIP_PARTS:-all parts, from nothing})"
        db=${SHIP_DB:-/tmp/xent-ship.db}
        [ -n "${SHIP_PARTS:-}" ] || rm -f "$db"
        ship() { run $TUNE --gpu "$GPU_KEY" --db "$db" -q --top 1 "$@"; }
        # a sweep file's shapes, every SHIP_EVERY-th from SHIP_OFFSET (comments dropped)
        shapes() {
            local f; f=$(mktemp)
            sed 's/#.*//' "$1" | awk -v k="${SHIP_EVERY:-1}" -v o="${SHIP_OFFSET:-0}" 'NF { if (i++ % k == o) print }' > "$f"
            echo "$f"
        }
        s32=$(shapes tunecache/sweep-shapes.txt) s16=$(shapes tunecache/sweep-shapes-16bit.txt)
        for part in ${SHIP_PARTS:-f32 bf16 f16 f32:none bf16:none bench train}; do
            echo "--- ship part $part ($(date -u +%H:%M:%S))"
            case $part in
            f32) ship --shapes-file "$s32" --budget "${SHIP_BUDGET:-3}" ;;
            bf16|f16) ship --shapes-file "$s16" --dtype "$part" --budget "${SHIP_BUDGET:-5}" ;;
            f32:none) ship --shapes-file "$s32" --reduction none --budget "${SHIP_BUDGET:-3}" ;;
            bf16:none) ship --shapes-file "$s16" --dtype bf16 --reduction none --budget "${SHIP_BUDGET:-5}" ;;
            bench)
                for sh in $TUNE_SHAPES; do
                    budget=8; [ "$sh" = 1048576x10 ] && budget=40 # its winner needed the larger budget
                    ship --shape "$sh" --budget "$budget"
                done
                for sh in $TUNE_BF16_SHAPES; do ship --shape "$sh" --dtype bf16 --budget 40; done ;;
            train)
                for t in 16384x50257:f32:fused:35 8192x128256:bf16:fused:35 8192x50257:bf16:fused:20 \
                         16384x50257:f32:backward:20 8192x128256:bf16:backward:20 4096x32000:bf16:fused:10 \
                         32768x4096:f32:fused:10 32768x4096:bf16:fused:10 32768x4096:f32:backward:10 \
                         32768x4096:bf16:backward:10; do
                    IFS=: read -r sh dt op budget <<< "$t"
                    ship --shape "$sh" --dtype "$dt" --op "$op" --budget "$budget"
                done ;;
            *) echo "FAILED: unknown ship part '$part'"; status=1 ;;
            esac
            # after each part, so that a call cut off by its limit still returns the parts it finished
            run cp "$db" "$OUT/ship.db"
        done
        run $TUNE export --gpu "$GPU_KEY" --db "$db" --output "$OUT/$GPU_KEY.sql"
        # the heuristic is derived from the H200's cache alone (docs/cache.md)
        [ "$GPU_KEY" != h200 ] || run python3 tools/heuristic-table.py "$OUT/$GPU_KEY.sql" > "$OUT/heuristic-table.c" ;;
    py)
        # the Python package: GPU and CPU pytest, the training run, dynamo's
        # graph-break check and the forward+backward benchmark (python/tests/run_gpu.sh;
        # PY_PARTS=tests or PY_PARTS=bench runs one of the two, where the time left is short)
        stage "python package"
        LIGER_WHEEL=${LIGER_WHEEL:-$(ls .whl/liger_kernel-*.whl 2>/dev/null | head -1)} \
            run bash python/tests/run_gpu.sh "$OUT/py" ;;
    vocabpar)
        # the vocabulary split across the GPUs of this machine over NCCL (bench/vocab_parallel.py):
        # each rank's loss and gradient against the unsharded float64 reference, then the time per
        # step of xent and of PyTorch's formulation, on 1, 2, 4 and 8 GPUs as the machine has them
        stage "vocabulary-parallel cross-entropy"
        ngpu=$(nvidia-smi -L | grep -c "^GPU")
        for k in 1 2 4 8; do
            [ "$k" -le "$ngpu" ] || continue
            NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 run timeout "${VOCABPAR_TIMEOUT:-600}" \
                python3 -m torch.distributed.run --standalone --nproc-per-node "$k" bench/vocab_parallel.py \
                --out "$OUT/vocabpar/gpus$k" ${VOCABPAR_SHAPES:+--shapes "$VOCABPAR_SHAPES"}
        done
        # the same from C with NCCL directly (tools/example_nccl.c), every GPU; libnccl.so.2 from
        # the toolkit's folder, else from torch's NCCL wheel
        if [ "$ngpu" -ge 1 ] && [ -x build/xent-example-nccl ]; then
            ncclib=$(python3 -c "import os, nvidia.nccl as m; print(os.path.join(list(m.__path__)[0], 'lib'))" 2>/dev/null)
            NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH="$LD_LIBRARY_PATH${ncclib:+:$ncclib}" run build/xent-example-nccl 8192 128256
        fi ;;
    gradprofile)
        # hardware counters of the fused rows kernel on the plan the lookup gives (bench/ncu_train.py)
        stage "profile the fused training kernel (Nsight Compute)"
        for sh in ${GRADPROFILE_SHAPES:-32768x4096 32768x4096:bf16 16384x50257}; do
            echo "--- $sh" >> "$OUT/gradprofile.txt"
            # the stall reasons in warps a cycle per issued instruction (what paces the kernel)
            stalls=$(for r in long_scoreboard barrier math_pipe_throttle wait short_scoreboard mio_throttle \
                lg_throttle not_selected dispatch_stall no_instruction membar; do
                printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' "$r"; done)
            run timeout 150 ncu --clock-control none -k 'regex:^xent_grad$' --launch-skip 2 --launch-count 1 \
                --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
                --section LaunchStats \
                --metrics "${stalls}sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,lts__t_sector_hit_rate.pct" \
                python3 bench/ncu_train.py "$sh" >> "$OUT/gradprofile.txt" 2>&1
        done
        grep -E "^---|Duration|DRAM Throughput|Memory Throughput|pipe_xu|pipe_fma|pipe_alu|issue_active|Achieved Occupancy|Theoretical Occupancy|hit_rate|Registers Per|Stall|stalled|Eligible|Issued Warp" "$OUT/gradprofile.txt" ;;
    bench)
        # xent through the shipped cache just exported, not the tuner's user cache
        stage "benchmark"
        datadir=$OUT; [ -f "$OUT/$GPU_KEY.sql" ] || datadir=$PWD/tunecache
        XENT_TUNECACHE=/nonexistent XENT_DATADIR="$datadir" run python3 bench/bench.py --out "$OUT/bench" ;;
    random)
        # xent on problems drawn at random (bench/random_problems.py): the floor, the
        # untuned lookup over the shipped cache and (RANDOM_BUDGET > 0) each problem's own
        # tune, into $OUT/random/. RANDOM_ONLY=i..j measures a piece of the draw (one call
        # fits 40 problems untuned, ~10 at RANDOM_BUDGET=30, ~20 at 10); merge the
        # pieces' random.json with --merge. The tuned cache stays in /tmp/xent-random.
        # RANDOM_FIXED=1 (default) appends the issue's 8 fixed problems as 40..47.
        # RANDOM_TUNED_FROM=JSON times an earlier report's tuned configs again instead of tuning.
        # A second random stage in the call reports into $OUT/random-2 (and so on), so that
        # "random retune random" times the same problems before and after a retune.
        rdir=$OUT/random; k=1; while [ -e "$rdir" ]; do k=$((k + 1)); rdir=$OUT/random-$k; done; mkdir -p "$rdir"
        stage "random problems ${RANDOM_ONLY:-all} (budget ${RANDOM_BUDGET:-30}) into $rdir"
        tune=(--budget "${RANDOM_BUDGET:-30}"); [ "${RANDOM_BUDGET:-30}" = 0 ] && tune=(--no-tune)
        [ -n "${RANDOM_TUNED_FROM:-}" ] && tune=(--tuned-from "$RANDOM_TUNED_FROM")
        XENT_DATADIR="${RANDOM_DATADIR:-$PWD/tunecache}" run python3 bench/random_problems.py \
            --seed "${RANDOM_SEED:-12}" --problems "${RANDOM_PROBLEMS:-40}" ${RANDOM_ONLY:+--only "$RANDOM_ONLY"} \
            $([ "${RANDOM_FIXED:-1}" = 1 ] && echo --with-fixed) \
            "${tune[@]}" --out "$rdir" ;;
    ab)
        # each build of build/variants (tools/ab-build.sh), interleaved, AB_REPS
        # times. fp32 AB_SHAPES: xent-example's back-to-back time (200 calls on
        # the same inputs, so small problems partly hit the L2) on its heuristic
        # plan, or with AB_PLANS=shipped the plan of tunecache/$GPU_KEY.sql. Any dtype:
        # AB_CONFIGS, a file of "SHAPE DTYPE CONFIG... [-- XENT-TUNE FLAGS]" lines (the
        # flags name the problem's kind, e.g. -- --label-smoothing 0.1 --weights), each timed by the
        # variant's xent-tune --config (the tuner's protocol and reference check)
        # for the op AB_OP (forward, fused or backward). AB_VARIANTS names the builds to time
        # (default: every folder of build/variants)
        stage "A/B of build/variants (${AB_PLANS:-heuristic} plans${AB_CONFIGS:+, configs of $AB_CONFIGS})"
        datadir=/nonexistent; [ "${AB_PLANS:-}" = shipped ] && datadir=$PWD/tunecache
        variants=(); for v in ${AB_VARIANTS:-$(ls build/variants)}; do variants+=("build/variants/$v/"); done
        for rep in $(seq "${AB_REPS:-2}"); do
            for sh in ${AB_SHAPES-64x262144 1048576x10 32768x4096 4096x32000}; do
                for v in "${variants[@]}"; do
                    us=$(XENT_TUNECACHE=/nonexistent XENT_DATADIR=$datadir "$v/xent-example" ${sh/x/ } | grep -oE "[0-9.]+ us/call on the GPU" | cut -d' ' -f1)
                    echo "rep$rep $sh $(basename "$v") ${us:-FAILED}"
                done
            done
            [ -n "${AB_CONFIGS:-}" ] || continue
            ab_lines "$AB_CONFIGS" | while read -r sh dt rest; do
                ab_split "$rest"
                for v in "${variants[@]}"; do
                    us=$("$v/xent-tune" --shape "$sh" --dtype "$dt" --op "${AB_OP:-forward}" --config "$cfg" "${kind[@]}" \
                        --db "/tmp/xent-ab-$(basename "$v").db" -q --top 1 |
                        awk '$1 == "fastest" {print $2}')
                    echo "rep$rep $sh $dt ${kind[*]} $(basename "$v") ${us:-FAILED} $cfg"
                done
            done
        done ;;
    pairs)
        # two configs of a problem timed in one xent-tune process (bench/config_pairs.py):
        # a rule that changes a config against the config it replaces, PAIRS_REPS times;
        # PAIRS_TUNE: another build's xent-tune (a variant of tools/ab-build.sh, for a pair
        # file that needs an experiment commit applied)
        stage "config pairs of ${PAIRS_FILE:?PAIRS_FILE names the pairs}"
        run python3 bench/config_pairs.py "$PAIRS_FILE" --reps "${PAIRS_REPS:-2}" ${PAIRS_TUNE:+--tune "$PAIRS_TUNE"} \
            --out "$OUT/pairs/$(basename "$PAIRS_FILE" .txt)" ;;
    threads)
        # 16 threads, each its own stream, workspace and problem, building
        # their plans at once, against a serial run (THREADS_ROUNDS launches
        # a thread, each read back and compared)
        stage "threads and streams"
        XENT_TEST_ROUNDS="${THREADS_ROUNDS:-20}" run timeout "${TEST_TIMEOUT:-600}" build/tests/gpu/check_streams ;;
    sanitize)
        # compute-sanitizer over a subset of the GPU suite chosen to fit about
        # 6 minutes (the tools slow kernels 10-100x, racecheck most): every
        # kernel family and launch path, at small sizes. memcheck: the C
        # example at 4096x1000, check_gpu's semantics case (ignored rows, all
        # ignored, offsets, bad targets: the out-of-range paths), check_grad's
        # ops (every 4th case), 4 threads of check_streams for 2 rounds (callers'
        # workspaces, streams). racecheck (shared memory hazards): the example and
        # check_gpu's split case (block reductions of split rows; every 6th of
        # its 144 configs: each kernel's instrumented load costs seconds).
        # initcheck (reads of device memory never written): the example,
        # check_gpu's basics, 4 threads of check_streams for 1 round. Each run
        # has SANITIZE_TIMEOUT seconds (default 100); a timeout is reported as
        # a failure, never as clean.
        stage "compute-sanitizer"
        CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
        st=${SANITIZE_TIMEOUT:-100}
        san() { local tool=$1; shift
            echo "--- $tool: $*"
            XENT_TEST_SEED=${XENT_TEST_SEED:-1} CK_FORK=no run timeout "$st" "$CS" --tool "$tool" --error-exitcode 99 \
                --print-limit 20 "$@"; }
        san memcheck build/xent-example 4096 1000
        CK_RUN_CASE=semantics san memcheck build/tests/gpu/check_gpu
        XENT_TEST_EVERY=4 CK_RUN_CASE=ops san memcheck build/tests/gpu/check_grad
        XENT_TEST_THREADS=4 XENT_TEST_ROUNDS=2 san memcheck build/tests/gpu/check_streams
        san racecheck build/xent-example 4096 1000
        XENT_TEST_EVERY=6 CK_RUN_CASE=split san racecheck build/tests/gpu/check_gpu
        san initcheck build/xent-example 4096 1000
        CK_RUN_CASE=basics san initcheck build/tests/gpu/check_gpu
        XENT_TEST_THREADS=4 XENT_TEST_ROUNDS=1 san initcheck build/tests/gpu/check_streams ;;
    faults)
        # a real tune killed (SIGKILL) at several points, then one on a full
        # disk (a file size limit of 64 KB, SIGXFSZ ignored so writes fail: the
        # cache's 32 KB shared index fits, so it opens, and its trial and
        # winner writes do not):
        # the cache must open, keep the earlier winner line for line, and the
        # full-disk tune must exit 4 saying the winner was not stored
        stage "faults during a tune"
        fdb=$(mktemp -d)/tune.db
        run $TUNE --db "$fdb" --shape 512x1000 --budget 3 -q --top 1
        before=$($TUNE export --gpu "${FAULT_GPU:-$GPU_KEY}" --db "$fdb" | grep -c "INSERT")
        keep=$($TUNE export --gpu "${FAULT_GPU:-$GPU_KEY}" --db "$fdb" | grep ", 512, 1000, ")
        [ -n "$keep" ] || { echo "FAILED: no earlier winner for 512x1000"; status=1; }
        for t in 1 2 3 5 8; do
            $TUNE --db "$fdb" --shape "4096x$((32000 + t))" --budget 20 -q --top 1 > /dev/null 2>&1 &
            pid=$!; sleep "$t"; kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
            now=$($TUNE export --gpu "${FAULT_GPU:-$GPU_KEY}" --db "$fdb") || { echo "FAILED: export after a kill at ${t} s"; status=1; }
            grep -qxF "$keep" <<< "$now" || { echo "FAILED: the earlier winner changed after a kill at ${t} s"; status=1; }
            echo "killed at ${t} s: $($TUNE show --db "$fdb" | tail -1)"
        done
        ( trap '' XFSZ; ulimit -f 64; exec $TUNE --db "$fdb" --shape 2048x4096 --budget 3 -q --top 1 ) > "$OUT/full.txt" 2>&1
        rc=$?; cat "$OUT/full.txt"
        [ "$rc" = 4 ] && grep -q "winner was not stored" "$OUT/full.txt" || { echo "FAILED: full disk: exit $rc"; status=1; }
        grep -qxF "$keep" <<< "$($TUNE export --gpu "${FAULT_GPU:-$GPU_KEY}" --db "$fdb")" || { echo "FAILED: the earlier winner changed on a full disk"; status=1; }
        echo "faults: $before winner(s) before, earlier winner kept through 5 kills and a full disk" ;;
    *) echo "unknown stage $s"; status=2 ;;
    esac
done
exit "$status"
} 2>&1 | tee -a "$LOG"
exit "${PIPESTATUS[0]}"
