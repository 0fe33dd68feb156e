#!/usr/bin/env bash
# Where the governed launch path's cost goes on a real GPU, by ablation (issue #21; run through the
# device tool from the repository root): this tree (full), and copies of it built with one part
# of the path cut out by a one-line edit, each run by launch_variants.py against native:
#   outer    the hook's outer layer only (region device, gate): Governed returns the launch
#            before the capture check, the clock, the mutex and the tracker
#   locked   the outer layer, the capture check, the clock and the mutex, no tracker (the
#            short path taken and nothing recorded: every launch unmeasured)
#   full     the whole path
# The copies measure nothing (their launches go uncharged): a measurement tool, never a build.
#   test/gpu/launch_path_ablation.sh [ROUNDS] [SECONDS]
set -uo pipefail
rounds=${1:-6}
seconds=${2:-3}
f=src/hook/launch_hooks.cc
for v in outer locked; do
  rm -rf "/tmp/abl-$v" && mkdir -p "/tmp/abl-$v"
  git ls-files -z | xargs -0 cp --parents -t "/tmp/abl-$v"
  cp -r third_party "/tmp/abl-$v/"
done
sed -i 's/  if (GateOf(c) == shm::Gate::kFree) return launch();/  if (GateOf(c) == shm::Gate::kFree || true) return launch();/' "/tmp/abl-outer/$f"
sed -i 's/waiting.tracker.TryContinue(StreamKey(stream, per_thread), key, now, depth_ns)/true/; s/      d.tracker.ContinuedLaunch(now, depth_ns);/      (void)0;/' "/tmp/abl-locked/$f"
grep -c 'kFree || true' "/tmp/abl-outer/$f" && grep -c '      (void)0;' "/tmp/abl-locked/$f" || { echo "an edit did not apply: $f changed"; exit 1; }
for d in . /tmp/abl-outer /tmp/abl-locked; do
  ( cd "$d" && cmake --preset gpu >/dev/null && cmake --build build/gpu -j 5 --target tessera tessera_hook 2>&1 | tail -n 1 ) &
done
nvcc -O2 -std=c++17 -arch=sm_90 test/gpu/stamped_work.cu -o build/stamped_work 2>&1 | tail -n 5
wait
V="outer=/tmp/abl-outer/build/gpu/cmd/tessera/tessera locked=/tmp/abl-locked/build/gpu/cmd/tessera/tessera full=build/gpu/cmd/tessera/tessera"
python3 test/gpu/launch_variants.py build/stamped_work launchbound 90 "$rounds" "$seconds" $V
python3 test/gpu/launch_variants.py build/stamped_work launchbound:3 90 "$rounds" "$seconds" $V
