#!/usr/bin/env bash
# Session 24, second call: what costs launch-bound loops at a share that does not bind since
# session 23's synchronize changes. A: this build; B: context-wide waits not fenced (as before
# cuCtxSynchronize_v2 was hooked); C: fenced, but a context-wide wait's completion not marked.
set -uo pipefail
cd "$(dirname "$0")/.."
for v in B C; do rm -rf /tmp/$v; mkdir -p /tmp/$v; git ls-files -z | xargs -0 cp --parents -t /tmp/$v; cp -r third_party /tmp/$v/; done
sed -i 's/  if (waited == Waited::kNone) return tickets;/  if (waited != Waited::kStream) return tickets;/' /tmp/B/src/hook/launch_hooks.cc
sed -i 's/  if (!tickets.taken) return;/  if (!tickets.taken || tickets.all) return;/' /tmp/C/src/hook/launch_hooks.cc
grep -c 'waited != Waited::kStream) return tickets' /tmp/B/src/hook/launch_hooks.cc; grep -c 'tickets.taken || tickets.all' /tmp/C/src/hook/launch_hooks.cc
for d in . /tmp/B /tmp/C; do ( cd $d && cmake --preset gpu >/dev/null && cmake --build build/gpu -j 5 --target tessera tessera_hook 2>&1 | tail -n 1 ) & done
H=$(find /usr/local/cuda* -name cupti_activity.h 2>/dev/null | head -n 1)
INC=$(dirname "$H"); D=$(dirname "$(find "$INC/../lib" -maxdepth 1 -name 'libcupti.so*' | head -n 1)")
nvcc -O2 -std=c++17 -arch=sm_90 -DSTAMPED_CUPTI -I"$INC" test/gpu/stamped_work.cu -o build/stamped_work -L"$D" -lcupti -Xlinker -rpath,"$D" 2>&1 | tail -n 5
wait
V="A=build/gpu/cmd/tessera/tessera B=/tmp/B/build/gpu/cmd/tessera/tessera C=/tmp/C/build/gpu/cmd/tessera/tessera"
timeout -s KILL 150 python3 .devrun/variants.py build/stamped_work launchbound 90 6 3 $V 2>&1 | tee $OUT/variants_lb.txt | tail -n 5
timeout -s KILL 150 python3 .devrun/variants.py build/stamped_work launchbound:3 90 6 3 $V 2>&1 | tee $OUT/variants_lb3.txt | tail -n 5
CPUS=4-11 SHAPES=cupy8 REPEATS=2 SECONDS_PER_RUN=5 SHARES="10 30 90" PAIRS=0 \
  timeout -s KILL 170 python3 test/gpu/busy_shares.py drive build/gpu $OUT
