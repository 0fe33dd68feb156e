#!/usr/bin/env bash
# Drift on real processes (issue 10's GPU part): no kubelet, no gRPC. A tenant under
# `tessera run --gpu-memory 4Gi` fills its cap, rewrites its region and allocates past the cap;
# an honest tenant holds 2 GiB; an outsider holds 1 GiB with no tessera at all. `tessera drift`
# (the agent's check, NVML per process) must flag the first over its cap, show the second with
# no drift beyond what the library cannot see, and name the third unattributed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
cmake --preset gpu >/dev/null && cmake --build build/gpu -j "$(nproc)" --target tessera tessera_hook 2>&1 | tail -n 1
g++ -std=c++20 -O2 -Iinclude -Ithird_party/cuda/include -o build/gpu/drift_probe test/gpu/drift_probe.cc -ldl
T=build/gpu/cmd/tessera/tessera P=build/gpu/drift_probe
w=$(mktemp -d)
start() {  # name, command...: starts with stdin held open by a sleeping writer
  local name=$1; shift
  mkfifo "$w/$name.in"
  ("$@" < "$w/$name.in" > "$w/$name.out" 2>&1 &)
  (sleep 60 > "$w/$name.in" &)
  for _ in $(seq 100); do grep -q HOLDING "$w/$name.out" 2>/dev/null && break; sleep 0.2; done
  grep -h "pid=" "$w/$name.out"
}
start hostile $T run --keep --gpu-memory 4Gi -- $P tamper 1073741824
start honest $T run --keep --gpu-memory 4Gi -- $P hold 2147483648
start outsider $P hold 1073741824
dirs=$(sed -n 's/.*region=\(.*\)\/region$/\1/p' "$w/hostile.out" "$w/honest.out")
echo "== nvidia-smi (outside every cap)"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
echo "== tessera drift $dirs"
$T drift $dirs; echo "exit code $?"
pkill -f "$P" ; pkill -f "sleep 60"; sleep 1
rm -rf "$w" $dirs
