#!/usr/bin/env bash
# Pack a kernel cache folder (XENT_KERNEL_CACHE) into one xz tar for the GPU machine, where
# tools/gpu-session.sh unpacks build/kernels.txz into its own kernel cache (docs/tuning.md,
# "Compiling ahead").
#   tools/pack-kernels.sh DIR [OUT]        (OUT: build/kernels.txz)
# Files go in order of size: CUBINs of like configs are alike in size and bytes, so that order
# puts them within xz's window of each other (15,141 kernels, 747 MB: 10.5 MB so, 66 MB in the
# folder's own order at xz -6).
set -euo pipefail
dir=${1:?usage: tools/pack-kernels.sh DIR [OUT]}
out=$(realpath -m "${2:-build/kernels.txz}")
mkdir -p "$(dirname "$out")"
(cd "$dir" && ls -S | grep -E '^[0-9a-f]+\.cubin$' | tar -cf - -T - | xz -9 > "$out.tmp")
mv "$out.tmp" "$out"
echo "$out: $(tar -tJf "$out" | wc -l) kernels, $(du -h "$out" | cut -f1)"
