#!/usr/bin/env bash
# Session 23, first call: where the governed path's ~8 % on the launch-bound loop goes.
# Paired runs (native beside governed/free at the same time on two CPU sets) for the C++ and the
# PyTorch loop, then the hook's stats on each, and the probes' gate off.
set -uo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=driver_version,name --format=csv,noheader
( cmake --preset gpu >/dev/null && cmake --build build/gpu -j 12 --target tessera tessera_hook 2>&1 | tail -n 1 ) &
nvcc -O2 -std=c++17 -arch=sm_90 test/gpu/launch_loop.cu -o build/launch_loop &
wait
T=build/gpu/cmd/tessera/tessera
L=build/launch_loop
lo() { python3 test/gpu/launch_overhead.py $T $L "$@" 2>&1 | grep -v "paired round" ; }
echo "== cpp governed"; LOOPS=cpp PAIRED=4-7/8-11 ROUNDS=12 SECONDS=3 lo $OUT/cpp_governed.json
echo "== cpp free";     LOOPS=cpp PAIRED=4-7/8-11 PAIRED_WAY=free ROUNDS=8 SECONDS=3 lo $OUT/cpp_free.json
echo "== cpp governed gate off"; TESSERA_PROBE_GATE=0 LOOPS=cpp PAIRED=4-7/8-11 ROUNDS=8 SECONDS=3 lo $OUT/cpp_gate0.json
echo "== cpp stats"
TESSERA_HOOK_STATS=1 taskset -c 4-7 timeout 60 $T run --gpu-memory 24Gi --gpu-cores 90 -- $L --seconds 3 > $OUT/cpp_stats.txt 2>&1
grep -E "stats|launches_per_s" $OUT/cpp_stats.txt | cut -c1-600
echo "== torch stats"
TESSERA_HOOK_STATS=1 taskset -c 4-7 timeout 90 $T run --gpu-memory 24Gi --gpu-cores 90 -- python3 test/gpu/busy_shares.py work launchbound --seconds 6 > $OUT/torch_stats.txt 2>&1
grep -E "stats" $OUT/torch_stats.txt | cut -c1-600
echo "== torch governed"; LOOPS=torch PAIRED=4-7/8-11 ROUNDS=5 SECONDS=6 lo $OUT/torch_governed.json
echo "== torch free";     LOOPS=torch PAIRED=4-7/8-11 PAIRED_WAY=free ROUNDS=3 SECONDS=6 lo $OUT/torch_free.json
