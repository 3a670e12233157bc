#!/usr/bin/env bash
# For CI (.ci/run; XENT_CI_TORCH=0 skips it): a torch for the CPU tests of the torch layer on a machine
# without a GPU.
# PyPI's Linux torch wheel is a CUDA build (about 0.5 GB to download, 1.2 GB installed) that links CUDA
# libraries a toolkit install may lack (cuFile, cuSPARSELt, NVSHMEM, a recent NCCL); this installs the
# wheel without its CUDA dependencies and gives the missing sonames empty stand-ins (their functions are
# never called on the CPU paths the tests take). Prints the LD_LIBRARY_PATH to use; exits non-zero if
# torch still does not import (the torch tests then skip).
#   usage: ci_torch.sh VENV_PYTHON STUBDIR
set -euo pipefail
PY=$1; STUBS=$2
TORCH_VERSION=${XENT_CI_TORCH_VERSION:-2.15.0}
mkdir -p "$STUBS"
$PY -m pip install -q --no-deps "torch==$TORCH_VERSION" >&2
$PY -m pip install -q filelock typing-extensions sympy networkx jinja2 fsspec numpy >&2
TL=$($PY -c "import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec('torch').origin), 'lib'))")
for round in 1 2 3 4 5; do
    err=$(LD_LIBRARY_PATH="$STUBS" $PY -c "import torch" 2>&1 | tail -1) || true
    [ -z "$err" ] && break
    # a missing library: "libX.so.N: cannot open shared object file"; a missing symbol: "undefined symbol: S"
    lib=$(echo "$err" | sed -n 's/.*ImportError: \(lib[^:]*\): cannot open shared object.*/\1/p')
    sym=$(echo "$err" | sed -n 's/.*undefined symbol: \([A-Za-z0-9_]*\).*/\1/p')
    if [ -n "$lib" ]; then
        stem=$(echo "$lib" | sed 's/^lib//; s/\.so.*//')
    elif [ -n "$sym" ]; then  # e.g. an NCCL older than torch's: stand in for the whole library
        case "$sym" in nccl*|pnccl*) lib=libnccl.so.2; stem=nccl;; *) echo "ci_torch: $err" >&2; exit 1;; esac
    else
        echo "ci_torch: $err" >&2; exit 1
    fi
    prefix=$(echo "$stem" | sed 's/_host$//')
    for f in "$TL"/*.so*; do nm -D --undefined-only "$f" 2>/dev/null; done | awk '{print $2}' \
        | grep -i "^p\?$prefix" | sed 's/@.*//' | sort -u | awk '{print "void "$1"(void){}"}' > "$STUBS/$stem.c"
    ver=$(for f in "$TL"/*.so*; do nm -D --undefined-only "$f" 2>/dev/null; done | awk '{print $2}' \
        | grep -i "^$prefix" | sed -n 's/.*@\([A-Z_0-9.]*\)$/\1/p' | sort -u | head -1)
    if [ -n "$ver" ]; then
        echo "$ver { global: *; };" > "$STUBS/$stem.map"
        cc -shared -fPIC -o "$STUBS/$lib" -Wl,-soname,"$lib" -Wl,--version-script="$STUBS/$stem.map" "$STUBS/$stem.c"
    else
        cc -shared -fPIC -o "$STUBS/$lib" -Wl,-soname,"$lib" "$STUBS/$stem.c"
    fi
    echo "ci_torch: stand-in $lib" >&2
done
LD_LIBRARY_PATH="$STUBS" $PY -c "import torch; print('ci_torch: torch', torch.__version__, file=__import__('sys').stderr)"
echo "$STUBS"
