#!/usr/bin/env bash
# The main job: builds tessera and runs the most complete thing it does today — the trust-level
# decision framework on the example policy and the seeds' four tiers.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
hack/install-deps.sh
cmake --preset release >/dev/null
cmake --build build/release -j "$(nproc)" --target tessera
tessera=build/release/cmd/tessera/tessera

policy=api/config/v1/policy.example.yaml
printf '\n##### tessera advise --policy %s\n' "$policy"
"$tessera" advise --policy "$policy"
for tier in team department customer regulated; do
  printf '\n##### tessera advise --trust %s --gpu H200 --workloads inference,training --policy %s\n' \
    "$tier" "$policy"
  "$tessera" advise --trust "$tier" --gpu H200 --workloads inference,training --policy "$policy"
done
