#!/usr/bin/env bash
# Session 23, fourth call: the streams shape's spread between calls and the knee (s just above b)
# of the launch-bound loop with host work; the hook's stats and tessera's busy line on each.
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
for s in launchbound streams; do taskset -c 4-11 build/stamped_work $s --seconds 3; taskset -c 4-11 build/stamped_work $s --seconds 3 --trace cupti; done
for cfg in "streams 90" "streams 50" "launchbound:3 50" "launchbound:3 30"; do
  set -- $cfg; sh=${1%%:*}; h=${1#*:}; [ "$h" = "$1" ] && h=-1
  echo "== stats $1 at $2"
  TESSERA_HOOK_STATS=1 taskset -c 4-11 timeout 60 $T run --gpu-memory 24Gi --gpu-cores $2 -- build/stamped_work $sh --seconds 4 --host-us $h > $OUT/stats_${sh}_$2.txt 2>&1
  grep -E "units_per_s|governed launches|fences:|probes:|GPU busy|throttled" $OUT/stats_${sh}_$2.txt | cut -c1-700
done
TRACE=1 CPUS=4-11 SECONDS=4 ROUNDS=2 SHAPES="streams launchbound:3" SHARES="40 50 60 90" \
  timeout -s KILL 300 python3 test/gpu/stamped_shares.py $T build/stamped_work $OUT/stamped_knee_streams.json | tail -n 9
