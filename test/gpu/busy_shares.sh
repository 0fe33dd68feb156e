#!/usr/bin/env bash
# Compute shares charge busy time, on the GPU host (compiler, CMake, CUDA, PyTorch): builds
# tessera, then runs test/gpu/busy_shares.py: per workload shape (launch-bound loop, graphs of
# tiny kernels, four overlapping streams, two processes of one container) its busy fraction b
# from a CUPTI trace of the solo run, its solo rate, and its rate under --gpu-cores 10/30/50/90
# against min(1, s / b); then the governed launch path's cost on the launch-bound loop where the
# share does not bind. ~7 min on an H200 once tessera is built. Output folder: $1 (default
# build/busy-shares-out): busy_shares.json; the table goes to stdout.
# SHAPES, SHARES, SECONDS_PER_RUN and PAIRS narrow the run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=${1:-build/busy-shares-out}
mkdir -p "$out"
cmake --preset gpu >/dev/null
cmake --build build/gpu -j "$(nproc)" --target tessera tessera_hook 2>&1 | tail -n 3
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 test/gpu/busy_shares.py drive "$PWD/build/gpu" "$(cd "$out" && pwd)"
