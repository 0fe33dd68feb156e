#!/usr/bin/env bash
# The main job: builds tessera and runs, on this machine, what it does:
#   1. `tessera demo`: a real control plane (etcd, kube-apiserver, kube-scheduler from their
#      upstream Go modules) with three simulated GPU nodes, tessera-scheduler (extender and
#      admission webhooks) and one tessera-node per node as local processes; the seeds' scenarios
#      replayed, with placements per GPU, ledgers, denials and their reasons, the policy in force,
#      and where enforcement would act on a GPU (docs/demo.md); then, as root with runc, the
#      showdown again on a real node (kubelet, containerd, runc; tessera from its chart) as real
#      pods whose processes are refused at their own caps;
#   2. `tessera sim`: the ATC'23 FGD trace experiment (Alibaba GPU trace, 1,213 nodes) through
#      the six published placement policies (their curves reproduced exactly) and tessera's online
#      policy, 10 seeds each, with a plot;
#   3. `tessera advise` on the example policy file: the seeds' trust-tier decision framework.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
hack/install-deps.sh
test/e2e/harness/build.sh build/e2e
cmake --preset release >/dev/null
cmake --build build/release -j "$(nproc)" --target tessera tessera-scheduler tessera-node \
  tessera_fake_nvml tessera_fake_cuda tessera_hook hook_client
tessera=build/release/cmd/tessera/tessera

"$tessera" demo --testcluster build/e2e/tessera-testcluster \
  --scheduler-binary build/release/cmd/tessera-scheduler/tessera-scheduler \
  --node-binary build/release/cmd/tessera-node/tessera-node \
  --fake-nvml-dir build/release/test/fakes/lib

# The same story on a real node where this machine can run one (root, runc): kubelet, containerd
# and runc here, tessera installed from its Helm chart and images, the seeds' showdown as real
# pods whose processes hit their caps (`tessera demo --real-node`; docs/demo.md).
if [[ $(id -u) == 0 ]] && command -v runc >/dev/null; then
  printf '\n##### a real node on this machine (kubelet + containerd + runc), tessera from its chart\n'
  # (An optional step: where a node cannot run here, say so and go on with the rest.)
  if ! (REALNODE_CHART=1 REALNODE_DEMO_ONLY=1 TESSERA_BUILD_DIR=build/release \
    test/e2e/harness/realnode-smoke.sh build/e2e/tessera-testcluster 2>&1 | grep --line-buffered -v DEPRECATION); then
    printf '\n(the demo on a real node failed: its output is above; going on)\n'
  fi
else
  printf '\n(no demo on a real node: it needs root and runc here; the demo above used simulated nodes)\n'
fi

printf '\n##### tessera sim: default trace, all policies x seeds 42..51\n'
"$tessera" sim --trace test/data/alibaba-gpu-v2023 --pods default --policy all --seeds 42..51 \
  --plot build/release/sim-default.svg
printf '\n(plot: build/release/sim-default.svg)\n'

policy=api/config/v1/policy.example.yaml
printf '\n##### tessera advise --policy %s\n' "$policy"
"$tessera" advise --policy "$policy"
printf '\n##### tessera advise --trust customer --gpu H200 --workloads inference,training --policy %s\n' "$policy"
"$tessera" advise --trust customer --gpu H200 --workloads inference,training --policy "$policy"
