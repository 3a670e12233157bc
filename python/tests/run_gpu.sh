#!/usr/bin/env bash
# GPU session for the Python package: install it from the carried build (no network, no compiler
# needed), run its GPU and CPU tests, then the forward+backward benchmark. Logs go under LOGDIR.
#
#   bash python/tests/run_gpu.sh LOGDIR            (from the repository root, build/libxent.so present)
#
# BENCH_TRAIN_ARGS: more arguments for the benchmark, e.g. "--scale 0.25" (the backward of a scaled loss).
# PY_PARTS: what to run, "tests bench" by default, or either alone where the time left is short (on an
# H200 the GPU tests take about 200 s, the benchmark with every implementation about a minute).
#
# Needs torch with CUDA (triton for torch.compile); Liger-Kernel is used when importable, and a wheel
# carried as LIGER_WHEEL=path is installed first (--no-deps). If the pip install fails (no wheel package
# for --no-build-isolation, say), the tests use the checkout's python/ with XENT_LIB=build/libxent.so.
set -uo pipefail
LOG=${1:?usage: run_gpu.sh LOGDIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$LOG"
cd "$ROOT"
PY=${PYTHON:-python3}
PARTS=${PY_PARTS:-tests bench}
for part in $PARTS; do
    case $part in tests|bench) ;; *) echo "PY_PARTS: unknown part '$part' (tests, bench)" >&2; exit 2 ;; esac
done
[ -f build/libxent.so ] || { echo "build/libxent.so is missing: build it (make build/libxent.so) and carry it" >&2; exit 2; }
[ -f build/libxent_torch.so ] || echo "no build/libxent_torch.so: the C++ operator's tests skip and the benchmark" \
    "times the Python path (build it for this machine's torch and carry it: README.md, From PyTorch)" >&2
cat build/COMMIT 2>/dev/null | sed 's/^/build commit: /' | tee "$LOG/env.txt"
nvidia-smi >> "$LOG/env.txt" 2>&1
$PY -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name())" 2>&1 | tee -a "$LOG/env.txt"
if [ -n "${LIGER_WHEEL:-}" ]; then
    $PY -m pip install --no-deps --no-index "$LIGER_WHEEL" > "$LOG/liger-install.log" 2>&1 || echo "liger wheel install failed (see liger-install.log)"
fi
export XENT_TEST_INSTALLED=0
if XENT_PREBUILT="$ROOT/build/libxent.so" $PY -m pip install --no-deps --no-build-isolation --no-index \
        --force-reinstall "$ROOT/python" > "$LOG/pip-install.log" 2>&1; then
    echo "installed the package (pip-install.log); testing the installed copy"
    export XENT_TEST_INSTALLED=1
    (cd /tmp && $PY -c "import xent, os; print('xent at', xent.__file__, 'lib', xent.default_library_path(), 'data', os.environ.get('XENT_DATADIR'))") 2>&1 | tee -a "$LOG/env.txt"
else
    echo "pip install failed (pip-install.log); testing the checkout's python/ with XENT_LIB"
    export XENT_LIB="$ROOT/build/libxent.so"
fi
rc=0
for part in $PARTS; do
    case $part in
    tests)
        # pytest from python/tests (its conftest puts python/ on sys.path unless XENT_TEST_INSTALLED=1)
        (cd python/tests && $PY -m pytest -v -rfEs test_gpu.py test_distributed.py) > "$LOG/pytest-gpu.log" 2>&1 || rc=1
        tail -5 "$LOG/pytest-gpu.log"
        grep -E '^(FAILED|ERROR) ' "$LOG/pytest-gpu.log"   # the names reach the caller even when the log does not
        (cd python/tests && $PY -m pytest -q -rfEs test_capi.py test_torch_cpu.py) > "$LOG/pytest-cpu.log" 2>&1 || rc=1
        tail -3 "$LOG/pytest-cpu.log"
        grep -E '^(FAILED|ERROR) ' "$LOG/pytest-cpu.log" ;;
    bench)
        $PY bench/bench_train.py --out "$LOG/bench" ${BENCH_TRAIN_ARGS:-} > "$LOG/bench_train.log" 2>&1 || rc=1
        tail -12 "$LOG/bench_train.log" ;;
    esac
done
exit $rc
