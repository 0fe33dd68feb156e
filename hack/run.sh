#!/usr/bin/env bash
# The main job: builds tessera and runs the most complete thing it does today —
#   1. `tessera sim`: the ATC'23 FGD trace experiment (Alibaba GPU trace, 1,213 nodes, default
#      pod list) through the six published placement policies (their curves reproduced exactly)
#      and tessera's online policy, 10 seeds each, with a plot of allocation vs arrival;
#   2. `tessera advise` on the example policy file: the seeds' trust-tier decision framework.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
hack/install-deps.sh
cmake --preset release >/dev/null
cmake --build build/release -j "$(nproc)" --target tessera
tessera=build/release/cmd/tessera/tessera

printf '\n##### tessera sim: default trace, all policies x seeds 42..51\n'
"$tessera" sim --trace test/data/alibaba-gpu-v2023 --pods default --policy all --seeds 42..51 \
  --plot build/release/sim-default.svg
printf '\n(plot: build/release/sim-default.svg)\n'

policy=api/config/v1/policy.example.yaml
printf '\n##### tessera advise --policy %s\n' "$policy"
"$tessera" advise --policy "$policy"
printf '\n##### tessera advise --trust customer --gpu H200 --workloads inference,training --policy %s\n' "$policy"
"$tessera" advise --trust customer --gpu H200 --workloads inference,training --policy "$policy"
