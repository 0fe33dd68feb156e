#!/usr/bin/env bash
# Session 24, fourth call: the short launch path and the busy log's runs (N, this tree) against
# the build before them (A, 0210a96), at a share that does not bind, interleaved with native
# runs; then N's delivered rate against min(1, s/b) where the share binds.
set -uo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=driver_version,name --format=csv,noheader
rm -rf /tmp/A; mkdir -p /tmp/A; git archive 0210a96 | tar -x -C /tmp/A; cp -r third_party /tmp/A/
for d in . /tmp/A; do ( cd $d && cmake --preset gpu >/dev/null && cmake --build build/gpu -j 8 --target tessera tessera_hook 2>&1 | tail -n 1 ) & done
H=$(find /usr/local/cuda* -name cupti_activity.h 2>/dev/null | head -n 1)
INC=$(dirname "$H"); D=$(dirname "$(find "$INC/../lib" -maxdepth 1 -name 'libcupti.so*' | head -n 1)")
nvcc -O2 -std=c++17 -arch=sm_90 -DSTAMPED_CUPTI -I"$INC" test/gpu/stamped_work.cu -o build/stamped_work -L"$D" -lcupti -Xlinker -rpath,"$D" 2>&1 | tail -n 5
wait
T=build/gpu/cmd/tessera/tessera
TESSERA_HOOK_STATS=1 taskset -c 4-11 timeout 60 $T run --gpu-memory 24Gi --gpu-cores 90 -- build/stamped_work launchbound --seconds 3 > $OUT/stats_N_launchbound.txt 2>&1
grep -E "units_per_s|governed launches|fenced waits|watcher's polls|fences:" $OUT/stats_N_launchbound.txt | sed 's/.*warn\] //' | cut -c1-260
V="A=/tmp/A/build/gpu/cmd/tessera/tessera N=$T"
timeout -s KILL 120 python3 .devrun/variants.py build/stamped_work launchbound 90 6 3 $V 2>&1 | tee $OUT/variants_lb_d.txt | tail -n 4
timeout -s KILL 120 python3 .devrun/variants.py build/stamped_work launchbound:3 90 6 3 $V 2>&1 | tee $OUT/variants_lb3_d.txt | tail -n 4
timeout -s KILL 80 python3 .devrun/variants.py build/stamped_work streams 90 4 3 $V 2>&1 | tee $OUT/variants_streams_d.txt | tail -n 4
TRACE=1 CPUS=4-11 SECONDS=3 ROUNDS=1 SHARES="10 30 50" SHAPES="launchbound graphs procs2" \
  timeout -s KILL 150 python3 test/gpu/stamped_shares.py $T build/stamped_work $OUT/stamped_shares_s24d.json | tail -n 10
