#!/usr/bin/env bash
# The real-GPU acceptance run for libtessera-cuda. On the GPU host (compiler, CMake, CUDA, PyTorch,
# CuPy; nothing else): builds the dependency-free parts with the project's pinned CUDA headers
# (third_party/cuda/include, carried from a machine that ran hack/install-deps.sh), compiles the
# workloads with nvcc, runs test/gpu/acceptance.py. Output folder: $1 (default build/gpu-out).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=${1:-build/gpu-out}
mkdir -p "$out"
cmake --preset gpu >/dev/null
cmake --build build/gpu -j "$(nproc)" --target tessera tessera_hook 2>&1 | tail -n 3
python3 test/gpu/acceptance.py "$PWD/build/gpu" "$(cd "$out" && pwd)"
