#!/usr/bin/env bash
# `tessera doctor` on the GPU host: builds the dependency-free parts with the project's pinned
# CUDA headers (third_party/cuda/include, carried), runs every experiment in every mode and keeps
# the report. Output folder: $1 (default build/doctor-out): report.txt, report.json, tenants' logs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=${1:-build/doctor-out}
shift || true
mkdir -p "$out"
cmake --preset gpu >/dev/null
cmake --build build/gpu -j "$(nproc)" --target tessera tessera_hook 2>&1 | tail -n 2
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
time build/gpu/cmd/tessera/tessera doctor --keep --json-file "$out/report.json" "$@" 2> >(tee "$out/progress.txt" >&2) | tee "$out/report.txt"
kept=$(sed -n "s/^tessera doctor: kept //p" "$out/progress.txt")
[ -n "$kept" ] && cp -r "$kept" "$out/work" && rm -rf "$kept"
