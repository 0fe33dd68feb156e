#!/usr/bin/env bash
# The preload library loads under an older glibc: a root assembled from Debian 11's libc6 and
# libc-bin (glibc 2.31; hack/install-deps.sh caches the .debs), the library named in its
# /etc/ld.so.preload as tessera-node injects it, and a dynamically linked program of that root
# started in it (chroot) with every symbol bound at start (LD_BIND_NOW). It must start, run the
# library's constructor and exit 0; a library needing a newer glibc, or libstdc++, fails to load.
# The same with the loader's --preload (LD_PRELOAD's path). Needs root (chroot); exits 77
# (skipped) without root or without the cache.
#
#   preload_old_glibc_test.sh LIBRARY CACHE_DIR
set -euo pipefail

lib=$1
cache=$2
if ((EUID != 0)); then
  echo "SKIP: needs root (chroot)"
  exit 77
fi
shopt -s nullglob
debs=("$cache"/libc6_*.deb "$cache"/libc-bin_*.deb)
if ((${#debs[@]} != 2)); then
  echo "SKIP: no Debian 11 libc6/libc-bin .debs in $cache (hack/install-deps.sh fetches them)"
  exit 77
fi
[[ -f $lib ]] || { echo "FAIL: $lib is missing"; exit 1; }

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
for deb in "${debs[@]}"; do dpkg-deb -x "$deb" "$root"; done
mkdir -p "$root/usr/local/lib/tessera"
cp "$lib" "$root/usr/local/lib/tessera/libtessera-cuda.so"
inside=/usr/local/lib/tessera/libtessera-cuda.so

failures=0
# Runs PROGRAM... in the root; expects exit 0, glibc 2.31 on stdout and our constructor called.
check() {
  local what=$1
  shift
  local out rc=0
  out=$(LD_BIND_NOW=1 LD_DEBUG=files chroot "$root" "$@" 2>"$root/stderr") || rc=$?
  if ((rc != 0)) || [[ $out != "glibc 2.31" ]] ||
     ! grep -q "calling init: $inside\$" "$root/stderr"; then
    echo "FAIL ($what): exit $rc, stdout '$out'"
    grep -E "error|tessera" "$root/stderr" | head -n 20 || true
    failures=$((failures + 1))
  else
    echo "ok ($what): started under $out with the library preloaded"
  fi
}

echo "$inside" >"$root/etc/ld.so.preload"
check /etc/ld.so.preload /usr/bin/getconf GNU_LIBC_VERSION
rm "$root/etc/ld.so.preload"
check "ld.so --preload" /lib64/ld-linux-x86-64.so.2 --preload "$inside" \
  /usr/bin/getconf GNU_LIBC_VERSION

((failures == 0)) || exit 1
echo "PASS"
