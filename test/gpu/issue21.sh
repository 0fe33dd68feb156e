#!/usr/bin/env bash
# The H200 runs issue #21 still needs, in one command (~9 min once tessera is built; the device
# tool allows 10 min a call: split with PARTS). Output folder: $1 (default build/issue21-out).
#   PARTS="gate shares spatial procs" (default all):
#   gate     a governed PyTorch launch-bound loop with the probes' gate on and off (TESSERA_PROBE_GATE,
#            each killed after 40 s if it stalls), with the governed path's timing (TESSERA_HOOK_STATS)
#   shares   busy_shares.sh (delivered rate against min(1, s/b), overhead where the share does
#            not bind); GATE=0 runs it without the gate
#   spatial  spatial_priority.sh (3 LC models x 3 BE shapes under MPS)
#   procs    two processes of one container (busy_shares.py procslb) at 30 % and 90 % with the
#            hook's probe stats (exact probes by timing, held ones, the long ones), then the
#            delivered rate of procslb, launchbound and cupystream with REPEATS pairs (default 3);
#            BEFORE=BUILD_DIR (a baseline's build) runs the stats with it too and each pair as a
#            triple (solo, baseline, this build): a change beside its baseline in the same run
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=${1:-build/issue21-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
parts=${PARTS:-gate shares spatial procs}
cmake --preset gpu >/dev/null && cmake --build build/gpu -j "$(nproc)" --target tessera tessera_hook 2>&1 | tail -n 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [[ " $parts " == *" gate "* ]]; then
  for gate in 0 1; do
    echo "== gate=$gate"
    TESSERA_PROBE_GATE=$gate TESSERA_HOOK_STATS=1 timeout -s KILL 40 build/gpu/cmd/tessera/tessera run \
      --gpu-cores 90 -- python3 test/gpu/busy_shares.py work launchbound --seconds 5 2>&1 |
      grep -E '"units"|stats: governed|stats: fences|compute governor|GPU busy' | tail -7
    echo "rc=$?"
  done
fi
if [[ " $parts " == *" shares "* ]]; then
  TESSERA_PROBE_GATE=${GATE:-1} SECONDS_PER_RUN=${SECONDS_PER_RUN:-5} PAIRS=${PAIRS:-6} \
    bash test/gpu/busy_shares.sh "$out/shares"
fi
if [[ " $parts " == *" spatial "* ]]; then
  LC_SECONDS=${LC_SECONDS:-8} bash test/gpu/spatial_priority.sh "$out/spatial"
fi
if [[ " $parts " == *" procs "* ]]; then
  for build in ${BEFORE:+"$BEFORE"} "$PWD/build/gpu"; do
    for share in 30 90; do
      echo "== procslb at $share % (probe stats), $build"
      TESSERA_HOOK_STATS=1 timeout -s KILL 60 "$build/cmd/tessera/tessera" run --gpu-cores "$share" \
        -- python3 test/gpu/busy_shares.py work procslb --seconds 5 2>&1 |
        grep -E 'stats: fences|stats: probes|GPU busy'
    done
  done
  mkdir -p "$out/procs"
  SHAPES=${SHAPES:-procslb launchbound cupystream} REPEATS=${REPEATS:-3} SECONDS_PER_RUN=${SECONDS_PER_RUN:-5} \
    python3 test/gpu/busy_shares.py drive "$PWD/build/gpu" "$out/procs" ${BEFORE:+--before "$BEFORE"}
fi
