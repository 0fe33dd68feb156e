#!/usr/bin/env bash
# Session 23, third call: b by CUPTI beside b by the kernels' stamps, for the stamped shapes
# and two more (launch-bound with host work, three processes).
set -uo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=driver_version,name --format=csv,noheader
( cmake --preset gpu >/dev/null && cmake --build build/gpu -j 12 --target tessera tessera_hook 2>&1 | tail -n 1 ) &
H=$(find /usr/local/cuda* /usr/local/lib/python3* /usr/lib/python3* /opt -name cupti_activity.h 2>/dev/null | head -n 1)
INC=$(dirname "$H"); LIBF=$(find "$INC/.." "$INC/../lib" "$INC/../lib64" "$INC/../../lib64" -maxdepth 1 -name 'libcupti.so*' 2>/dev/null | head -n 1)
echo "CUPTI: $H $LIBF"
D=$(dirname "$LIBF")
nvcc -O2 -std=c++17 -arch=sm_90 -DSTAMPED_CUPTI -I"$INC" test/gpu/stamped_work.cu -o build/stamped_work -L"$D" -lcupti -Xlinker -rpath,"$D" 2>&1 | tail -n 5
[ -x build/stamped_work ] || { ls "$D" | grep -i cupti; exit 1; }
wait
T=build/gpu/cmd/tessera/tessera
for s in launchbound graphs streams; do taskset -c 4-11 build/stamped_work $s --seconds 3 --trace cupti; done
TRACE=1 CPUS=4-11 SECONDS=4 ROUNDS=1 SHAPES="launchbound graphs streams procs2 launchbound:3 procs3:2" \
  timeout -s KILL 400 python3 test/gpu/stamped_shares.py $T build/stamped_work $OUT/stamped_shares_cupti.json
