#!/usr/bin/env bash
# Issue #22 part 2: tessera-node on the GPU host, which has a compiler, CMake and CUDA but no gRPC.
# Copies a tessera-node built here (it links Debian's gRPC, protobuf, abseil, OpenSSL, ...) with
# every shared library it loads, the dynamic loader included, into DIR (ignored by git: carry it
# with the device tool). On the GPU host it then runs whatever that host's glibc is:
#   DIR/ld-linux-x86-64.so.2 --library-path DIR DIR/tessera-node FLAGS...
# Usage: test/gpu/carry_node.sh [BINARY] [DIR]   (defaults: build/dev/cmd/tessera-node/tessera-node,
#        .devrun/node). Prints the size carried and checks that the copy starts (--help).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
binary=${1:-build/dev/cmd/tessera-node/tessera-node}
dir=${2:-.devrun/node}
[ -x "$binary" ] || { echo "carry_node: $binary: not an executable (build tessera-node first)" >&2; exit 2; }
rm -rf "$dir"
mkdir -p "$dir"
cp "$binary" "$dir/"
# Every resolved library (the ones ldd prints as "name => path (address)"), and the loader.
ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
  cp -L "$lib" "$dir/"
done
loader=$(ldd "$binary" | awk '$1 ~ /^\/.*ld-linux/ {print $1}')
[ -n "$loader" ] || { echo "carry_node: no dynamic loader in ldd's output" >&2; exit 1; }
cp -L "$loader" "$dir/$(basename "$loader")"
strip --strip-unneeded "$dir"/*.so* "$dir/tessera-node" 2>/dev/null || true
"$dir/$(basename "$loader")" --library-path "$dir" "$dir/tessera-node" --help >/dev/null
echo "carry_node: $(du -sh "$dir" | cut -f1) in $dir ($(ls "$dir" | wc -l) files); run it as:"
echo "  $dir/$(basename "$loader") --library-path $dir $dir/tessera-node ..."
