#!/usr/bin/env bash
# Pack a kernel cache folder (XENT_KERNEL_CACHE) into one xz tar for the GPU machine, where
# tools/gpu-session.sh unpacks build/kernels.txz into its own kernel cache (docs/tuning.md,
# "Compiling ahead").
#   tools/pack-kernels.sh DIR [OUT]        (OUT: build/kernels.txz)
# Files go in order of size: CUBINs of like configs are alike in size and bytes, so that order
# puts them within xz's window of each other (a cache of many kinds of kernel packed about six
# times smaller so than in the folder's own order).
set -euo pipefail
dir=${1:?usage: tools/pack-kernels.sh DIR [OUT]}
out=$(realpath -m "${2:-build/kernels.txz}")
mkdir -p "$(dirname "$out")"
files=$(cd "$dir" && ls -S | grep -E '^[0-9a-f]+\.cubin$') || { echo "$0: no kernels (*.cubin) in $dir" >&2; exit 1; }
n=$(wc -l <<< "$files")
(cd "$dir" && tar -cf - -T - <<< "$files" | xz -9 > "$out.tmp")
mv "$out.tmp" "$out"
echo "$out: $n kernels, $(du -h "$out" | cut -f1)"
