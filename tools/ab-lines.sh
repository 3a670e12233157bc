# An A/B configs file (bench/ab/*.txt), read the same way by tools/ab-build.sh, which compiles
# its configs ahead, and by the `ab` stage of tools/gpu-session.sh, which times them. Sourced.
# Each line: "SHAPE DTYPE CONFIG... [-- XENT-TUNE FLAGS]"; '#' comments and blank lines skipped.

# The file's lines.
ab_lines() { grep -vE '^\s*(#|$)' "$1"; }

# A line's words after SHAPE and DTYPE into cfg (the config) and kind (the flags, an array).
ab_split() {
    cfg=${1%% -- *} kind=()
    [ "$cfg" = "$1" ] || read -ra kind <<< "${1#* -- }"
}
