#!/usr/bin/env bash
# Smoke test of simulated GPU nodes and of `up --scheduler-config`.
#
# Part 1: `up` (no scheduler config) + `simnodes --nodes 3 --gpus-per-node 2
#   --gpu-memory 16Gi`: 3 Nodes with tessera's resources and a GPU inventory
#   annotation (JSON, 2 GPUs); 20 plain pods and one tessera.dev/gpu pod are
#   bound by the real kube-scheduler and go Running; a normal delete (default
#   grace period) finishes; simnodes stops (nodes stay), starts again on the
#   same nodes, and with --delete-on-exit removes them.
# Part 2: `up --scheduler-config` rejects a bad file, then starts with a
#   config that has a second profile and an ignorable extender at an
#   unreachable URL (managedResources tessera.dev/gpu-memory); pods of both
#   profiles, one asking for tessera.dev/gpu-memory, are bound and Running;
#   --scheduler-arg=--v=2 shows the scheduler's V(2) lines.
# Every process started here is stopped on exit, also on failure.
#
# usage: test/e2e/harness/simnodes-smoke.sh [BINARY]
#   BINARY  default: <repo>/build/e2e/tessera-testcluster (see build.sh)
# env: SMOKE_TIMEOUT  overall limit in seconds (default 300)
#      SMOKE_KEEP=1   keep the work directory (logs, state) for debugging
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
bin=${1:-$root/build/e2e/tessera-testcluster}
timeout=${SMOKE_TIMEOUT:-300}
me=simnodes-smoke.sh
[[ -x "$bin" ]] || { echo "$me: $bin not found; run test/e2e/harness/build.sh first" >&2; exit 1; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
if command -v jq >/dev/null 2>&1; then json=jq
elif command -v python3 >/dev/null 2>&1; then json=python3
else echo "$me: needs jq or python3 to check JSON" >&2; exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/tessera-simnodes-smoke.XXXXXX")
kc=$work/kubeconfig
pids=()          # every background process started here
start=$SECONDS
deadline=$((SECONDS + timeout))

# stop PID: SIGTERM, wait up to 30 s, then SIGKILL; returns its exit status.
stop() {
  local p=$1 rc=0
  kill -0 "$p" 2>/dev/null && kill -TERM "$p" 2>/dev/null || true
  for _ in $(seq 1 300); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$p" 2>/dev/null; then
    echo "$me: process $p did not stop within 30s; killing" >&2
    kill -KILL "$p" 2>/dev/null || true
  fi
  wait "$p" 2>/dev/null || rc=$?
  return "$rc"
}
cleanup() {
  local rc=$? i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do stop "${pids[i]}" || true; done
  if (( rc != 0 )); then
    echo "$me: FAILED; last lines of the logs:" >&2
    for f in "$work"/*.log; do [[ -f "$f" ]] && { echo "--- $f" >&2; tail -n 25 "$f" >&2; }; done
  fi
  if [[ "${SMOKE_KEEP:-0}" == 1 || $rc -ne 0 ]]; then
    echo "$me: work directory kept: $work" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() { echo "$me: $*" >&2; exit 1; }
say() { echo "$me: [$((SECONDS - start))s] $*"; }
k() { "$bin" kubectl --kubeconfig "$kc" --request-timeout=10s "$@"; }
left() { local l=$((deadline - SECONDS)); (( l > 0 )) || fail "overall timeout (${timeout}s) reached"; echo "$l"; }
forget() { local p=$1 i; for i in "${!pids[@]}"; do [[ "${pids[i]}" == "$p" ]] && unset 'pids[i]'; done; pids=("${pids[@]}"); }
now_ms() { date +%s%3N; }

# check_inventory FILE NODE: the tessera.dev/gpu-inventory annotation of a
# node made with --gpus-per-node 2 --gpu-memory 16Gi (contract 0002, section 5).
check_inventory() {
  if [[ $json == jq ]]; then
    jq -e --arg node "$2" '.apiVersion == "tessera.dev/inventory/v1" and .node == $node
      and .agentVersion == "simnodes" and .generation == 1 and (.updatedAt | test("Z$"))
      and (.gpus | length) == 2 and ([.gpus[].index] == [0, 1])
      and ([.gpus[] | (.uuid | test("^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"))
           and .model == "NVIDIA H200" and .memoryBytes == 17179869184 and .smCount == 132
           and .numaNode == .index and .managed and .health == "healthy" and .healthReason == ""
           and .mig == {"mode": "disabled", "instances": []}] | all)' "$1" >/dev/null
  else
    python3 - "$1" "$2" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1]))
ok = (d["apiVersion"] == "tessera.dev/inventory/v1" and d["node"] == sys.argv[2]
      and d["agentVersion"] == "simnodes" and d["generation"] == 1 and len(d["gpus"]) == 2
      and all(re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", g["uuid"])
              and g["index"] == i and g["model"] == "NVIDIA H200" and g["memoryBytes"] == 17179869184
              and g["smCount"] == 132 and g["numaNode"] == i and g["managed"] is True
              and g["health"] == "healthy" and g["healthReason"] == ""
              and g["mig"] == {"mode": "disabled", "instances": []} for i, g in enumerate(d["gpus"])))
sys.exit(0 if ok else 1)
PY
  fi
}

# start_up NAME ARGS...: `up` in the background, log in $work/NAME.log; waits
# for /readyz through kubectl. Sets up_pid.
start_up() {
  local name=$1; shift
  rm -f "$kc"
  "$bin" up --kubeconfig "$kc" --dir "$work/$name-state" "$@" >"$work/$name.log" 2>&1 &
  up_pid=$!; pids+=("$up_pid")
  while :; do
    kill -0 "$up_pid" 2>/dev/null || fail "up ($name) exited early"
    if [[ -f "$kc" ]] && [[ "$(k get --raw /readyz 2>/dev/null || true)" == ok ]]; then break; fi
    left >/dev/null; sleep 0.2
  done
  # No controller-manager: create the ServiceAccount the admission plugin wants.
  k create serviceaccount default >/dev/null
  say "up ($name): /readyz ok"
}
stop_up() {
  local t0 rc=0; t0=$(now_ms)
  stop "$up_pid" || rc=$?; forget "$up_pid"
  (( rc == 0 )) || fail "up exited with status $rc on SIGTERM"
  say "up stopped (exit 0) in $(( $(now_ms) - t0 )) ms"
}

# start_simnodes NAME ARGS...: simnodes in the background; waits for its
# ready file. Sets sim_pid.
start_simnodes() {
  local name=$1; shift
  local ready=$work/$name.ready
  rm -f "$ready"
  "$bin" simnodes --kubeconfig "$kc" --ready-file "$ready" "$@" >"$work/$name.out" 2>"$work/$name.log" &
  sim_pid=$!; pids+=("$sim_pid")
  while [[ ! -f "$ready" ]]; do
    kill -0 "$sim_pid" 2>/dev/null || fail "simnodes ($name) exited early"
    left >/dev/null; sleep 0.1
  done
  # The ready line goes to stdout right after the ready file.
  for _ in $(seq 1 50); do [[ -s "$work/$name.out" ]] && break; sleep 0.1; done
  say "simnodes ($name): $(cat "$work/$name.out")"
}
stop_simnodes() {
  local rc=0
  stop "$sim_pid" || rc=$?; forget "$sim_pid"
  (( rc == 0 )) || fail "simnodes exited with status $rc on SIGTERM"
}

# wait_pods SELECTOR COUNT: until COUNT pods match and all are Running.
wait_pods_running() {
  local sel=$1 n=$2 phases
  while :; do
    phases=$(k get pods -l "$sel" -o 'jsonpath={range .items[*]}{.status.phase}{"\n"}{end}')
    [[ $(grep -c '^Running$' <<<"$phases" || true) == "$n" && $(grep -c . <<<"$phases" || true) == "$n" ]] && break
    left >/dev/null; sleep 0.2
  done
}
wait_pods_gone() {
  local sel=$1
  while [[ -n "$(k get pods -l "$sel" -o name)" ]]; do left >/dev/null; sleep 0.2; done
}

pod_yaml() { # NAME LABEL [SCHEDULER] [EXTRA-RESOURCES-YAML]
  cat <<YAML
---
apiVersion: v1
kind: Pod
metadata: {name: $1, labels: {app: $2}}
spec:
  schedulerName: ${3:-default-scheduler}
  containers:
  - name: c
    image: registry.invalid/never-pulled:0
    resources:
      requests: {cpu: 100m, memory: 64Mi}
${4:-}
YAML
}

############################################################################
# Part 1: simulated nodes under the default scheduler configuration.
start_up plain
start_simnodes sim1 --nodes 3 --gpus-per-node 2 --gpu-memory 16Gi
grep -qx 'simnodes: ready 3 nodes' "$work/sim1.out" || fail "simnodes did not print 'simnodes: ready 3 nodes'"

nodes=$(k get nodes -l tessera.dev/simulated=true -o 'jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}')
[[ "$nodes" == $'gpu-node-000\ngpu-node-001\ngpu-node-002' ]] || fail "unexpected nodes: $(echo $nodes)"
for n in $nodes; do
  k get node "$n" -o 'jsonpath={.metadata.annotations.tessera\.dev/gpu-inventory}' >"$work/inv-$n.json"
  check_inventory "$work/inv-$n.json" "$n" || fail "node $n: bad inventory annotation: $(cat "$work/inv-$n.json")"
  got=$(k get node "$n" -o 'jsonpath={.status.allocatable.tessera\.dev/gpu} {.status.allocatable.tessera\.dev/gpu-memory} {.status.allocatable.tessera\.dev/gpu-cores} {.status.allocatable.tessera\.dev/gpu-slot} {.status.conditions[?(@.type=="Ready")].status} {.status.nodeInfo.kubeletVersion} taints={.spec.taints}')
  [[ "$got" == "2 32Gi 200 64 True v1.36.3 taints=" ]] || fail "node $n: unexpected status: $got"
done
say "3 nodes: inventory JSON with 2 GPUs each; allocatable gpu=2 gpu-memory=32Gi gpu-cores=200 gpu-slot=64; Ready; untainted"
say "inventory of gpu-node-000: $(cat "$work/inv-gpu-node-000.json")"

t0=$(now_ms)
{ for i in $(seq -w 0 19); do pod_yaml "plain-$i" simsmoke; done
  pod_yaml gpu-whole simsmoke-gpu default-scheduler '      limits: {tessera.dev/gpu: "1"}'
} | k create -f - >/dev/null
wait_pods_running app=simsmoke 20
wait_pods_running app=simsmoke-gpu 1
t_run=$(( $(now_ms) - t0 ))
bad=$(k get pods -l 'app in (simsmoke,simsmoke-gpu)' -o 'jsonpath={range .items[*]}{.spec.nodeName}{" "}{.status.conditions[?(@.type=="Ready")].status}{" "}{.status.containerStatuses[0].ready}{"\n"}{end}' \
      | grep -cvE '^gpu-node-00[0-2] True true$' || true)
[[ $bad == 0 ]] || fail "$bad pods not bound to a simulated node and Ready"
say "20 plain pods + 1 tessera.dev/gpu pod bound and Running/Ready in ${t_run} ms; spread: $(k get pods -l app=simsmoke -o 'jsonpath={range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort | uniq -c | awk '{printf "%s=%s ", $2, $1}')"

t0=$(now_ms)
k delete pods -l 'app in (simsmoke,simsmoke-gpu)' --wait=false >/dev/null   # default grace period (30 s)
wait_pods_gone 'app in (simsmoke,simsmoke-gpu)'
say "21 pods deleted (default grace period) and gone in $(( $(now_ms) - t0 )) ms"

stop_simnodes
[[ $(k get nodes -l tessera.dev/simulated=true -o name | wc -l) == 3 ]] || fail "nodes did not survive simnodes' SIGTERM"
say "simnodes stopped (exit 0); the 3 nodes stay"

start_simnodes sim1-again --nodes 3 --gpus-per-node 2 --gpu-memory 16Gi --delete-on-exit
cmp -s "$work/inv-gpu-node-000.json" <(k get node gpu-node-000 -o 'jsonpath={.metadata.annotations.tessera\.dev/gpu-inventory}') \
  || fail "restart changed an unchanged inventory annotation"
pod_yaml again simsmoke-again | k create -f - >/dev/null
wait_pods_running app=simsmoke-again 1
stop_simnodes
[[ -z "$(k get nodes -l tessera.dev/simulated=true -o name)" ]] || fail "--delete-on-exit left nodes behind"
[[ -z "$(k get pods -l app=simsmoke-again -o name)" ]] || fail "--delete-on-exit left the node's pods behind"
say "simnodes restarted on the same nodes (inventory unchanged, pod Running); --delete-on-exit removed nodes and pods"
stop_up

############################################################################
# Part 2: up --scheduler-config.
cat >"$work/bad-sched.yaml" <<'YAML'
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
extendrs: []
YAML
rc=0; "$bin" up --kubeconfig "$work/bad.kubeconfig" --dir "$work/bad-state" \
  --scheduler-config "$work/bad-sched.yaml" >"$work/bad-up.log" 2>&1 || rc=$?
(( rc != 0 )) || fail "up accepted a bad --scheduler-config"
grep -q "bad-sched.yaml" "$work/bad-up.log" || fail "up's error does not name the bad file: $(cat "$work/bad-up.log")"
say "bad --scheduler-config refused (exit $rc): $(grep -m1 bad-sched.yaml "$work/bad-up.log" | cut -c1-200)"

cat >"$work/sched.yaml" <<'YAML'
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
- schedulerName: tessera-smoke-scheduler
extenders:
- urlPrefix: http://127.0.0.1:1/tessera   # nothing listens there
  filterVerb: filter
  prioritizeVerb: prioritize
  weight: 1
  httpTimeout: 2s
  nodeCacheCapable: true
  ignorable: true
  managedResources:
  - name: tessera.dev/gpu-memory
    ignoredByScheduler: false
YAML
start_up sched --scheduler-config "$work/sched.yaml" --scheduler-arg=--v=2
cfg=$work/sched-state/kube-scheduler-config.yaml
grep -q "kubeconfig: $work/sched-state/admin.kubeconfig" "$cfg" && grep -q "leaderElect: false" "$cfg" \
  || fail "completed scheduler config lacks kubeconfig/leaderElect: $(cat "$cfg")"
start_simnodes sim2 --nodes 2 --prefix sched-node- --gpus-per-node 1 --gpu-memory 80Gi

t0=$(now_ms)
{ pod_yaml plain-default smoke2 default-scheduler
  pod_yaml plain-profile smoke2 tessera-smoke-scheduler
  pod_yaml gpu-memory smoke2 default-scheduler '      limits: {tessera.dev/gpu-memory: 4Gi}'
} | k create -f - >/dev/null
wait_pods_running app=smoke2 3
say "with --scheduler-config: pods of both profiles and a tessera.dev/gpu-memory pod (unreachable ignorable extender) Running in $(( $(now_ms) - t0 )) ms"
grep -q 'Successfully bound pod to node' "$work/sched.log" || fail "--scheduler-arg=--v=2 did not raise the scheduler's verbosity"
! grep -q 'Successfully bound pod to node' "$work/plain.log" || fail "default verbosity logs V(2) scheduler lines"
say "--scheduler-arg=--v=2: scheduler V(2) lines logged ($(grep -c 'Successfully bound pod to node' "$work/sched.log")); none at the default verbosity"
grep -q 'tessera.dev/gpu-memory\|127.0.0.1:1' "$work/sched.log" && say "extender errors seen and ignored: $(grep -c '127.0.0.1:1' "$work/sched.log") log lines" || true
stop_simnodes
stop_up
say "PASS in $((SECONDS - start))s"
