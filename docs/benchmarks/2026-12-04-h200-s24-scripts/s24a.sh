#!/usr/bin/env bash
# Session 24, first call: launch-bound at 90 % again (0.939 in session 23's last call), the loop
# with 3 us of host work in three rounds, and an unseen shape: a transformer decode step (PyTorch).
set -uo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=driver_version,name --format=csv,noheader
git log --oneline -1 2>/dev/null
( cmake --preset gpu >/dev/null && cmake --build build/gpu -j 12 --target tessera tessera_hook 2>&1 | tail -n 1 ) &
H=$(find /usr/local/cuda* -name cupti_activity.h 2>/dev/null | head -n 1)
INC=$(dirname "$H"); D=$(dirname "$(find "$INC/../lib" -maxdepth 1 -name 'libcupti.so*' | head -n 1)")
nvcc -O2 -std=c++17 -arch=sm_90 -DSTAMPED_CUPTI -I"$INC" test/gpu/stamped_work.cu -o build/stamped_work -L"$D" -lcupti -Xlinker -rpath,"$D" 2>&1 | tail -n 5
wait
[ -x build/stamped_work ] || exit 1
T=build/gpu/cmd/tessera/tessera
TESSERA_HOOK_STATS=1 taskset -c 4-11 timeout 60 $T run --gpu-memory 24Gi --gpu-cores 90 -- build/stamped_work launchbound --seconds 4 > $OUT/stats_lb_90.txt 2>&1
grep -E "units_per_s|governed launches|GPU busy|waiting|stats: cuCtxSynchronize" $OUT/stats_lb_90.txt | cut -c1-300
TRACE=1 CPUS=4-11 SECONDS=3 ROUNDS=3 SHARES="90 50" SHAPES="launchbound" \
  timeout -s KILL 120 python3 test/gpu/stamped_shares.py $T build/stamped_work $OUT/stamped_lb_s24a.json | grep -v '^$'
TRACE=1 CPUS=4-11 SECONDS=3 ROUNDS=3 SHARES="30 50 90" SHAPES="launchbound:3" \
  timeout -s KILL 150 python3 test/gpu/stamped_shares.py $T build/stamped_work $OUT/stamped_lb3_s24a.json | grep -v '^$'
CPUS=4-11 SHAPES=decode REPEATS=3 SECONDS_PER_RUN=5 PAIRS=0 \
  timeout -s KILL 260 python3 test/gpu/busy_shares.py drive build/gpu $OUT
