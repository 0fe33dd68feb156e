#!/usr/bin/env bash
# Compute shares on the GPU host (compiler, CMake, CUDA with cuBLAS, python3): builds tessera and
# test/gpu/compute_workload.cu, then runs test/gpu/compute_shares.py: (a) accuracy of one capped
# container per workload kind, (b) two containers' splits and work-conserving reclaim, (d) launch
# overhead with only a memory cap. ~7 min on an H200 once tessera is built. Output folder: $1
# (default build/compute-shares-out): compute_shares.json; the tables go to stdout.
# PARTS="a b d" (default) picks parts; REPEATS sets (d)'s interleaved pairs (default 30).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=${1:-build/compute-shares-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cmake --preset gpu >/dev/null
cmake --build build/gpu -j "$(nproc)" --target tessera tessera_hook 2>&1 | tail -n 3
nvcc -O2 -std=c++17 -arch=sm_90 -o "$out/compute_workload" test/gpu/compute_workload.cu -lcublas -lcuda
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 test/gpu/compute_shares.py "$PWD/build/gpu" "$out"
