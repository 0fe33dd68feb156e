#!/usr/bin/env bash
# Session 24, third call: where a launch-bound loop's time goes at a share that does not bind.
# A: this build (wait and watcher stats added); B: context-wide waits not fenced; D: a wait's
# fences do not wake the watcher.
set -uo pipefail
cd "$(dirname "$0")/.."
for v in B D; do rm -rf /tmp/$v; mkdir -p /tmp/$v; git ls-files -z | xargs -0 cp --parents -t /tmp/$v; cp -r third_party /tmp/$v/; cp src/hook/launch_hooks.cc /tmp/$v/src/hook/; done
sed -i 's/  if (waited == Waited::kNone) return tickets;/  if (waited != Waited::kStream) return tickets;/' /tmp/B/src/hook/launch_hooks.cc
perl -0pi -e 's/  g\.work\.NotifyOne\(\);\n  return tickets;/  return tickets;/' /tmp/D/src/hook/launch_hooks.cc
grep -c 'waited != Waited::kStream) return tickets' /tmp/B/src/hook/launch_hooks.cc; grep -c 'g.work.NotifyOne' src/hook/launch_hooks.cc /tmp/D/src/hook/launch_hooks.cc
for d in . /tmp/B /tmp/D; do ( cd $d && cmake --preset gpu >/dev/null && cmake --build build/gpu -j 5 --target tessera tessera_hook 2>&1 | tail -n 1 ) & done
H=$(find /usr/local/cuda* -name cupti_activity.h 2>/dev/null | head -n 1)
INC=$(dirname "$H"); D=$(dirname "$(find "$INC/../lib" -maxdepth 1 -name 'libcupti.so*' | head -n 1)")
nvcc -O2 -std=c++17 -arch=sm_90 -DSTAMPED_CUPTI -I"$INC" test/gpu/stamped_work.cu -o build/stamped_work -L"$D" -lcupti -Xlinker -rpath,"$D" 2>&1 | tail -n 5
wait
for v in A B D; do
  t=build/gpu/cmd/tessera/tessera; [ $v = A ] || t=/tmp/$v/build/gpu/cmd/tessera/tessera
  for s in launchbound launchbound:3; do
    h=""; [ $s = launchbound:3 ] && h="--host-us 3"
    echo "== $v $s"; TESSERA_HOOK_STATS=1 taskset -c 4-11 timeout 60 $t run --gpu-memory 24Gi --gpu-cores 90 -- build/stamped_work ${s%%:*} $h --seconds 3 > $OUT/stats_${v}_${s%%:*}${h:+3}.txt 2>&1
    grep -E "units_per_s|governed launches|fenced waits|watcher's polls|fences:" $OUT/stats_${v}_${s%%:*}${h:+3}.txt | sed 's/.*warn\] //' | cut -c1-260
  done
done
V="A=build/gpu/cmd/tessera/tessera B=/tmp/B/build/gpu/cmd/tessera/tessera D=/tmp/D/build/gpu/cmd/tessera/tessera"
timeout -s KILL 150 python3 .devrun/variants.py build/stamped_work launchbound 90 6 3 $V 2>&1 | tee $OUT/variants_lb_c.txt | tail -n 5
