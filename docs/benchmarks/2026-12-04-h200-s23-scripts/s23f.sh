#!/usr/bin/env bash
# Session 23, sixth call: with cuCtxSynchronize_v2 intercepted (CUDA 13's cudaDeviceSynchronize)
# and a returned wait's work out of the depth: streams, launch-bound, two processes; the C++
# launch loop's cost again.
set -uo pipefail
cd "$(dirname "$0")/.."
( cmake --preset gpu >/dev/null && cmake --build build/gpu -j 12 --target tessera tessera_hook 2>&1 | tail -n 1 ) &
nvcc -O2 -std=c++17 -arch=sm_90 test/gpu/launch_loop.cu -o build/launch_loop &
H=$(find /usr/local/cuda* -name cupti_activity.h 2>/dev/null | head -n 1)
INC=$(dirname "$H"); D=$(dirname "$(find "$INC/../lib" -maxdepth 1 -name 'libcupti.so*' | head -n 1)")
nvcc -O2 -std=c++17 -arch=sm_90 -DSTAMPED_CUPTI -I"$INC" test/gpu/stamped_work.cu -o build/stamped_work -L"$D" -lcupti -Xlinker -rpath,"$D" 2>&1 | tail -n 5
wait
T=build/gpu/cmd/tessera/tessera
TESSERA_HOOK_STATS=1 taskset -c 4-11 timeout 60 $T run --gpu-memory 24Gi --gpu-cores 90 -- build/stamped_work streams --seconds 4 > $OUT/stats_streams_90.txt 2>&1
grep -E "units_per_s|governed launches|GPU busy|stats: cuCtxSynchronize" $OUT/stats_streams_90.txt | cut -c1-400
TRACE=1 CPUS=4-11 SECONDS=4 ROUNDS=1 SHAPES="streams launchbound procs2" \
  timeout -s KILL 170 python3 test/gpu/stamped_shares.py $T build/stamped_work $OUT/stamped_shares_s23f.json | tail -n 13
LOOPS=cpp PAIRED=4-7/8-11 ROUNDS=8 SECONDS=3 timeout -s KILL 45 python3 test/gpu/launch_overhead.py $T build/launch_loop $OUT/cpp_governed_s23f.json 2>&1 | grep -v "paired round"
