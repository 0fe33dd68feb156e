#!/usr/bin/env bash
# Session 24, sixth call (the last minutes): the per-stream lanes on four streams taking turns
# and on the launch-bound loop, against native, share 90 %.
set -uo pipefail
cd "$(dirname "$0")/.."
( cmake --preset gpu >/dev/null && cmake --build build/gpu -j 14 --target tessera tessera_hook 2>&1 | tail -n 1 ) &
nvcc -O2 -std=c++17 -arch=sm_90 test/gpu/stamped_work.cu -o build/stamped_work 2>&1 | tail -n 5
wait
V="N=build/gpu/cmd/tessera/tessera"
timeout -s KILL 40 python3 .devrun/variants.py build/stamped_work streams 90 4 3 $V 2>&1 | tee $OUT/variants_streams_f.txt | tail -n 3
timeout -s KILL 40 python3 .devrun/variants.py build/stamped_work launchbound 90 4 3 $V 2>&1 | tee $OUT/variants_lb_f.txt | tail -n 3
