#!/usr/bin/env bash
# Build xent-example and xent-tune from git revisions (or the working tree,
# ".") into build/variants/NAME/, for an A/B of template changes on the GPU
# machine: the `ab` stage of tools/gpu-session.sh times each build's plans,
# interleaved, in one call, so that changes of a few microseconds are not
# lost in the drift between calls.
#   tools/ab-build.sh base=HEAD~1 new=.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 NAME=REV|. ..." >&2; exit 2; }
root=$(git rev-parse --show-toplevel)
out=$root/build/variants
mkdir -p "$out"
for spec in "$@"; do
    name=${spec%%=*} rev=${spec#*=}
    [ "$name" != "$spec" ] || { echo "$0: '$spec' is not NAME=REV" >&2; exit 2; }
    tmp=$(mktemp -d)
    if [ "$rev" = . ]; then
        (cd "$root" && git ls-files -co --exclude-standard | tar -cf - -T -) | tar -x -C "$tmp"
    else
        git -C "$root" archive "$rev" | tar -x -C "$tmp"
    fi
    make -s -C "$tmp" build/xent-example build/xent-tune >/dev/null
    rm -rf "${out:?}/$name"
    mkdir -p "$out/$name"
    cp "$tmp/build/xent-example" "$tmp/build/xent-tune" "$out/$name/"
    rm -rf "$tmp"
    echo "$out/$name/: $rev"
done
