#!/bin/sh
# Rebuild cnn_classify.v1.o (the committed object), as examples/alkali/build.sh does: clang-14 -target bpf -O2.
#   examples/alkali/cnn/build.sh [OUTDIR]      CLANG=... picks another compiler
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
clang=${CLANG:-clang-14}
mkdir -p "$out"
"$clang" -target bpf -O2 -mcpu=v1 -g0 -I"$here/.." -c "$here/cnn_classify.c" -o "$out/cnn_classify.v1.o"
