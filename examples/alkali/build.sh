#!/bin/sh
# Rebuild the committed firmware objects: every *.c here for BPF ISA v1, v2 and v3.
#   examples/alkali/build.sh [OUTDIR]      (default: this folder)
# Needs clang-14 (Debian: apt-get install clang-14); CLANG=... picks another compiler.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
clang=${CLANG:-clang-14}
mkdir -p "$out"
for src in "$here"/*.c; do
    name=$(basename "$src" .c)
    for cpu in v1 v2 v3; do
        "$clang" -target bpf -O2 -mcpu=$cpu -g0 -I"$here" -c "$src" -o "$out/$name.$cpu.o"
    done
done
