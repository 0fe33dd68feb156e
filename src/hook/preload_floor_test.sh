#!/usr/bin/env bash
# The preload library stays under its promised floor (deployments/images/preload-abi-floor):
# every symbol version it needs belongs to a family listed there, at or below the listed version,
# none of a family listed as "none", and it names no library but the C runtime's as NEEDED (no
# libstdc++.so.6, no libgcc_s.so.1). Fails naming the offending libraries, versions and symbols.
#
#   preload_floor_test.sh LIBRARY FLOOR_FILE
set -euo pipefail

lib=$1
floor_file=$2
[[ -f $lib ]] || { echo "FAIL: $lib is missing"; exit 1; }
[[ -f $floor_file ]] || { echo "FAIL: $floor_file is missing"; exit 1; }

declare -A floor=()
while read -r family version _; do
  [[ -z $family || $family == \#* ]] && continue
  floor[$family]=$version
done <"$floor_file"
[[ -n ${floor[GLIBC]:-} ]] || { echo "FAIL: $floor_file has no GLIBC line"; exit 1; }

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# The C runtime's libraries: what any glibc container has.
allowed_needed=" libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 ld-linux-x86-64.so.2 "
needed=$(readelf -d -W "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p')
[[ -n $needed ]] || fail "no NEEDED entries read from $lib"
for n in $needed; do
  [[ $allowed_needed == *" $n "* ]] || fail "$lib needs $n (only the C runtime is allowed)"
done

# Every version it needs (.gnu.version_r), with or without a symbol of its own.
needs=$(readelf -V -W "$lib" | awk '/^Version needs section/ {in_r = 1; next}
                                    /^Version (definition|symbols) section/ {in_r = 0}
                                    in_r && / Name: / {for (i = 1; i < NF; ++i) if ($i == "Name:") print $(i + 1)}')
[[ -n $needs ]] || fail "no version needs read from $lib"
highest_glibc=""
symbols_of() { objdump -T "$lib" | awk -v v="($1)" '$0 ~ /\*UND\*/ && index($0, v) {print $NF}' | tr '\n' ' '; }
for need in $needs; do
  family=${need%_*}
  version=${need##*_}
  promised=${floor[$family]:-}
  if [[ -z $promised ]]; then
    fail "$need: family $family is not in $floor_file (symbols: $(symbols_of "$need"))"
  elif [[ $promised == none ]]; then
    fail "$need: $floor_file promises no $family (symbols: $(symbols_of "$need"))"
  elif ! [[ $version =~ ^[0-9]+(\.[0-9]+)*$ ]]; then
    fail "$need: not a numbered version (symbols: $(symbols_of "$need"))"
  elif [[ $(printf '%s\n%s\n' "$version" "$promised" | sort -V | tail -n 1) != "$promised" ]]; then
    fail "$need is above the promised floor ${family}_$promised (symbols: $(symbols_of "$need"))"
  fi
  if [[ $family == GLIBC && $version =~ ^[0-9.]+$ ]]; then
    highest_glibc=$(printf '%s\n%s\n' "$version" "$highest_glibc" | sort -V | tail -n 1)
  fi
done

echo "$lib: NEEDED $(echo $needed); highest GLIBC version needed: ${highest_glibc:-(none)}" \
  "(promised <= ${floor[GLIBC]})"
if ((failures)); then
  echo "$failures problem(s); deployments/images/README.md, \"The preload library's floor\""
  exit 1
fi
echo "PASS"
