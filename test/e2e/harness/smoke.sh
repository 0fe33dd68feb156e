#!/usr/bin/env bash
# Smoke test of the e2e harness's control plane: start etcd + kube-apiserver +
# kube-scheduler (`tessera-testcluster up`), check /readyz through the real
# kubectl, create a Node and a Pod, and wait until the real scheduler binds the
# Pod to the Node (the proof that the scheduler is up and working). Tears everything down on exit.
#
# usage: test/e2e/harness/smoke.sh [BINARY]
#   BINARY  default: <repo>/build/e2e/tessera-testcluster (see build.sh)
# env: SMOKE_TIMEOUT  overall limit in seconds (default 180)
#      SMOKE_KEEP=1   keep the work directory (logs, state) for debugging
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
bin=${1:-$root/build/e2e/tessera-testcluster}
timeout=${SMOKE_TIMEOUT:-180}
[[ -x "$bin" ]] || { echo "smoke.sh: $bin not found; run test/e2e/harness/build.sh first" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/tessera-smoke.XXXXXX")
kc=$work/kubeconfig
pid=""
start=$SECONDS
deadline=$((SECONDS + timeout))

cleanup() {
  local rc=$?
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "smoke.sh: control plane did not stop within 30s; killing" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
  fi
  if (( rc != 0 )); then
    echo "smoke.sh: FAILED; last lines of the control plane log:" >&2
    tail -n 40 "$work/up.log" >&2 || true
  fi
  if [[ "${SMOKE_KEEP:-0}" == 1 || $rc -ne 0 ]]; then
    echo "smoke.sh: work directory kept: $work" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

fail() { echo "smoke.sh: $*" >&2; exit 1; }
k() { "$bin" kubectl --kubeconfig "$kc" --request-timeout=10s "$@"; }
left() { local l=$((deadline - SECONDS)); (( l > 0 )) || fail "overall timeout (${timeout}s) reached"; echo "$l"; }

"$bin" up --kubeconfig "$kc" --dir "$work/state" >"$work/up.log" 2>&1 &
pid=$!

# 1. API server /readyz. `up` writes the kubeconfig only once /readyz is ok;
#    check it again through the real kubectl anyway.
ready=""
while :; do
  kill -0 "$pid" 2>/dev/null || fail "tessera-testcluster up exited early"
  if [[ -f "$kc" ]]; then
    ready=$(k get --raw /readyz 2>/dev/null || true)
    [[ "$ready" == ok ]] && break
  fi
  left >/dev/null
  sleep 0.2
done
echo "smoke.sh: /readyz: $ready (after $((SECONDS - start))s)"

# 2. A fake Node (no kubelet behind it) and a Pod; the real scheduler must
#    bind the Pod to the Node. No controller-manager runs, so create the
#    "default" ServiceAccount that the ServiceAccount admission plugin wants.
k create serviceaccount default >/dev/null
k create -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Node
metadata:
  name: smoke-node-0
  labels:
    kubernetes.io/hostname: smoke-node-0
status:
  capacity: {cpu: "4", memory: 8Gi, pods: "110"}
  allocatable: {cpu: "4", memory: 8Gi, pods: "110"}
  conditions:
  - type: Ready
    status: "True"
    reason: SmokeTest
    message: fake node for the harness smoke test
YAML
# The TaintNodesByCondition admission plugin taints every new Node
# not-ready:NoSchedule; without a node lifecycle controller (no
# kube-controller-manager here) nothing removes it, so do it by hand.
k taint node smoke-node-0 node.kubernetes.io/not-ready:NoSchedule- >/dev/null
k create -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Pod
metadata:
  name: smoke-pod
spec:
  containers:
  - name: c
    image: registry.invalid/never-pulled:0
    resources:
      requests: {cpu: 100m, memory: 64Mi}
YAML
k wait --for='jsonpath={.spec.nodeName}=smoke-node-0' pod/smoke-pod --timeout="$(left)s" >/dev/null \
  || fail "pod was not bound to smoke-node-0"
echo "smoke.sh: pod/smoke-pod bound to $(k get pod smoke-pod -o 'jsonpath={.spec.nodeName}') by kube-scheduler"
echo "smoke.sh: PASS in $((SECONDS - start))s"
