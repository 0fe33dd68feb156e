#!/usr/bin/env bash
# Issue #22 part 2: tessera-node and tessera-node-host on the GPU host, which has a compiler, CMake
# and CUDA but no gRPC. Copies both, built here (they link Debian's gRPC, protobuf, abseil,
# OpenSSL, ...), with every shared library they load, the dynamic loader included, into DIR
# (ignored by git: carry it with the device tool), and writes a wrapper for each that runs it
# through the carried loader, whatever the GPU host's glibc is:
#   DIR/tessera-node ARGS...        DIR/tessera-node-host ARGS...
# (the programs themselves are DIR/lib/*.bin). Usage: test/gpu/carry_node.sh [BUILD] [DIR]
# (defaults: build/dev, .devrun/node). Prints the size carried and checks that both start.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:-build/dev}
dir=${2:-.devrun/node}
binaries=("$build/cmd/tessera-node/tessera-node" "$build/test/nodehost/tessera-node-host")
for b in "${binaries[@]}"; do
  [ -x "$b" ] || { echo "carry_node: $b: not an executable (build it first)" >&2; exit 2; }
done
case "$(realpath -m "$dir")" in
  / | "$PWD" | "$HOME" | /usr* | /etc* | /lib* | /bin*)
    echo "carry_node: refusing to replace $dir" >&2
    exit 2
    ;;
esac
if ldd "${binaries[@]}" | grep -q "not found"; then
  echo "carry_node: a library is missing:" >&2
  ldd "${binaries[@]}" | grep "not found" >&2
  exit 1
fi
# Addresses stay numeric (127.0.0.1): no NSS module is needed, so none is carried.
rm -rf "$dir"
mkdir -p "$dir/lib"
# Every resolved library (the ones ldd prints as "name => path (address)"), and the loader.
for b in "${binaries[@]}"; do
  cp "$b" "$dir/lib/$(basename "$b").bin"
  ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
    cp -L "$lib" "$dir/lib/"
  done
done
loader=$(ldd "${binaries[0]}" | awk '$1 ~ /^\/.*ld-linux/ {print $1}')
[ -n "$loader" ] || { echo "carry_node: no dynamic loader in ldd's output" >&2; exit 1; }
cp -L "$loader" "$dir/lib/$(basename "$loader")"
strip --strip-unneeded "$dir"/lib/* 2>/dev/null || true
for b in "${binaries[@]}"; do
  name=$(basename "$b")
  cat >"$dir/$name" <<WRAP
#!/bin/sh
# $name through the carried loader and libraries (test/gpu/carry_node.sh).
here=\$(cd "\$(dirname "\$0")" && pwd)
exec "\$here/lib/$(basename "$loader")" --library-path "\$here/lib" "\$here/lib/$name.bin" "\$@"
WRAP
  chmod +x "$dir/$name"
done
"$dir/tessera-node" --help >/dev/null
{ "$dir/tessera-node-host" 2>&1 || true; } | grep -q usage
echo "carry_node: $(du -sh "$dir" | cut -f1) in $dir ($(ls "$dir/lib" | wc -l) files)"
