#!/usr/bin/env bash
# Session 23, second call: delivered rate against min(1, s/b) with the stamped C++ workloads
# (b from the kernels' own %globaltimer stamps), and more paired rounds of the C++ launch loop.
set -uo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=driver_version,name --format=csv,noheader
( cmake --preset gpu >/dev/null && cmake --build build/gpu -j 12 --target tessera tessera_hook 2>&1 | tail -n 1 ) &
nvcc -O2 -std=c++17 -arch=sm_90 test/gpu/launch_loop.cu -o build/launch_loop &
nvcc -O2 -std=c++17 -arch=sm_90 test/gpu/stamped_work.cu -o build/stamped_work || exit 1
wait
T=build/gpu/cmd/tessera/tessera
for s in launchbound graphs streams; do taskset -c 4-11 build/stamped_work $s --seconds 3; done
CPUS=4-11 SECONDS=4 ROUNDS=2 timeout -s KILL 330 python3 test/gpu/stamped_shares.py $T build/stamped_work $OUT/stamped_shares.json
echo "== cpp governed"
LOOPS=cpp PAIRED=4-7/8-11 ROUNDS=20 SECONDS=3 python3 test/gpu/launch_overhead.py $T build/launch_loop $OUT/cpp_governed.json 2>&1 | grep -v "paired round"
