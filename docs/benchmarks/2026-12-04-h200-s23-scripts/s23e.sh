#!/usr/bin/env bash
# Session 23, fifth call: after "a returned wait takes its work out of the depth": the stamped
# shapes against min(1, s/b) by stamps and by CUPTI, each governed run between two native ones.
set -uo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=driver_version,name --format=csv,noheader
( cmake --preset gpu >/dev/null && cmake --build build/gpu -j 12 --target tessera tessera_hook 2>&1 | tail -n 1 ) &
H=$(find /usr/local/cuda* -name cupti_activity.h 2>/dev/null | head -n 1)
INC=$(dirname "$H"); D=$(dirname "$(find "$INC/../lib" -maxdepth 1 -name 'libcupti.so*' | head -n 1)")
nvcc -O2 -std=c++17 -arch=sm_90 -DSTAMPED_CUPTI -I"$INC" test/gpu/stamped_work.cu -o build/stamped_work -L"$D" -lcupti -Xlinker -rpath,"$D" 2>&1 | tail -n 5
[ -x build/stamped_work ] || exit 1
wait
T=build/gpu/cmd/tessera/tessera
TESSERA_HOOK_STATS=1 taskset -c 4-11 timeout 60 $T run --gpu-memory 24Gi --gpu-cores 90 -- build/stamped_work streams --seconds 4 > $OUT/stats_streams_90.txt 2>&1
grep -E "units_per_s|governed launches|GPU busy" $OUT/stats_streams_90.txt | cut -c1-400
TRACE=1 CPUS=4-11 SECONDS=4 ROUNDS=1 SHAPES="launchbound graphs streams procs2 launchbound:3 procs3:2" \
  timeout -s KILL 440 python3 test/gpu/stamped_shares.py $T build/stamped_work $OUT/stamped_shares_s23e.json | tail -n 26
