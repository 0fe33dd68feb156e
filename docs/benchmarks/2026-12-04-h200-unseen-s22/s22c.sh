#!/usr/bin/env bash
set -uo pipefail
cd "$(dirname "$0")/.."
cmake --preset gpu >/dev/null && cmake --build build/gpu -j 16 --target tessera tessera_hook 2>&1 | tail -n 1


for r in 1 2; do
  echo "== native"; .devrun/three.sh 2>&1 | grep rate | tr '\n' ' '; echo
  for s in 90 20; do
    echo "== tessera run --gpu-cores $s (one container, three processes)"
    timeout -s KILL 60 build/gpu/cmd/tessera/tessera run --gpu-cores $s -- bash -c .devrun/three.sh 2>&1 | grep -E "rate|GPU busy" | tr '\n' ' ' | cut -c1-400; echo
  done
done
