#!/usr/bin/env bash
# Build xent-example and xent-tune from git revisions, the working tree (".")
# or HEAD with a patch applied (a path ending in .patch, e.g. bench/ab/*.patch)
# into build/variants/NAME/, for an A/B of template changes on the GPU
# machine: the `ab` stage of tools/gpu-session.sh times each build's plans,
# interleaved, in one call, so that changes of a few microseconds are not
# lost in the drift between calls. AB_ALSO names more make targets under
# build/ to copy beside them (e.g. AB_ALSO=tests/gpu/check_grad); AB_OUT, another
# folder for the builds than build/variants. With AB_CONFIGS (and AB_OP) as the
# `ab` stage takes them, each build also compiles those configs for GPU_KEY
# (default h200) into $XENT_KERNEL_CACHE, for tools/pack-kernels.sh, so that the
# stage times instead of compiling (docs/tuning.md, "Compiling ahead"); a config
# a build refuses is said and skipped.
#   tools/ab-build.sh base=HEAD~1 new=.
#   AB_ALSO=tests/gpu/check_grad tools/ab-build.sh base=HEAD fast=bench/ab/grad-store-fast-path.patch
#   XENT_KERNEL_CACHE=/tmp/kc AB_OP=fused AB_CONFIGS=bench/ab/stash-prefetch.txt \
#       tools/ab-build.sh base=HEAD pf=bench/ab/stash-prefetch.patch && tools/pack-kernels.sh /tmp/kc
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 NAME=REV|.|PATCH ..." >&2; exit 2; }
root=$(git rev-parse --show-toplevel)
out=${AB_OUT:-$root/build/variants}
mkdir -p "$out"
also=()
for t in ${AB_ALSO:-}; do also+=("build/$t"); done
[ -z "${AB_CONFIGS:-}" ] || : "${XENT_KERNEL_CACHE:?AB_CONFIGS compiles ahead into XENT_KERNEL_CACHE: set it}"
. "$root/tools/ab-lines.sh"

# Each line of AB_CONFIGS compiled by the build in $1.
compile_ahead() {
    local total n=0
    total=$(ab_lines "$AB_CONFIGS" | wc -l)
    ab_lines "$AB_CONFIGS" | while read -r sh dt rest; do
        ab_split "$rest"
        "$1/xent-tune" --compile-only --gpu "${GPU_KEY:-h200}" --shape "$sh" --dtype "$dt" --op "${AB_OP:-forward}" \
            --config "$cfg" "${kind[@]}" -q > /dev/null 2>&1 || echo "$(basename "$1"): not compiled: $sh $dt $rest" >&2
        n=$((n + 1))
        echo "$(basename "$1"): compiled ahead $n/$total" >&2
    done
}
for spec in "$@"; do
    name=${spec%%=*} rev=${spec#*=}
    [ "$name" != "$spec" ] || { echo "$0: '$spec' is not NAME=REV" >&2; exit 2; }
    tmp=$(mktemp -d)
    if [ "$rev" = . ]; then
        (cd "$root" && git ls-files -co --exclude-standard | tar -cf - -T -) | tar -x -C "$tmp"
    elif [[ "$rev" == *.patch ]]; then
        git -C "$root" archive HEAD | tar -x -C "$tmp"
        (cd "$tmp" && git apply "$root/$rev")
    else
        git -C "$root" archive "$rev" | tar -x -C "$tmp"
    fi
    make -s -C "$tmp" build/xent-example build/xent-tune "${also[@]}" >/dev/null
    rm -rf "${out:?}/$name"
    mkdir -p "$out/$name"
    cp "$tmp/build/xent-example" "$tmp/build/xent-tune" "$out/$name/"
    for t in "${also[@]}"; do cp "$tmp/$t" "$out/$name/"; done
    rm -rf "$tmp"
    [ -z "${AB_CONFIGS:-}" ] || compile_ahead "$out/$name"
    echo "$out/$name/: $rev"
done
