#!/usr/bin/env bash
# A real node on this machine (issue #24, first step): the harness's control plane
# (`tessera-testcluster up`) and kube-controller-manager, the whole upstream kubelet linked into
# the same binary (`tessera-testcluster real-kubelet`), containerd 2.x with its runc shim built
# from their Go modules (CDI enabled), Debian's runc and CNI plugins (a bridge). An image of
# busybox-static is written without a container engine (`tessera-testcluster oci-image`) and
# imported into containerd's store: no registry. Checks that the node becomes Ready, that a pod
# placed by kube-scheduler reaches Running with a pod IP, that `kubectl logs` and `kubectl exec`
# work, and that the container's cgroup names its pod (kubelet's cgroupfs driver); then removes
# everything.
#
# REALNODE_CHART=1 then installs tessera as a user would, from its Helm chart and its images
# (issue #24 parts 2 and 3): hack/build-images.sh builds the images from the binaries of
# TESSERA_BUILD_DIR (default build/dev), imported into containerd's store with a kube-scheduler
# image (this harness's binary) and a CUDA client image (the preload library's integration
# client). The chart's DaemonSet runs tessera-node on the real node from its image (the fake NVML
# and driver in a host folder mounted as the driver's, driver.mountLibDir; device nodes of the
# run's own under driver.devRoot), its init containers install the preload library, and its
# device plugin registers with the real kubelet; the chart's Deployment runs tessera-scheduler
# and kube-scheduler, its webhooks (failurePolicy Fail) reached through their Service. Checks the
# agent's pod, the Node's tessera.dev/gpu-slot, the installed library, the inventory published
# through the `kubernetes` Service (kube-proxy); `tessera demo --real-node` (the seeds'
# showdown as real pods, each process refused at its own cap); then GPU pods as real containers: two tenants
# placed by the chart's kube-scheduler and extender, each started with its CDI device and
# refused at its own memory cap (cuMemGetInfo shows the cap), a compute share under the arbiter in
# a container of uid 1000, their GPU's device node openable
# there and refused to a pod without a GPU that makes it itself; compute drift attributed by a
# container's cgroup (the fake GPUs' usage shared through TESSERA_FAKE_STATE, the agent's NVML
# listing host PIDs); then an agent restart and a kubelet restart under a running GPU container,
# containerd restarted without CDI and with its spec folders elsewhere (the pods' Events say why
# their containers have no GPU or never start), a drain, and the chart's uninstall.
#
# usage: test/e2e/harness/realnode-smoke.sh [TESSERA_TESTCLUSTER]
#   (default $TESSERA_TESTCLUSTER, else build/e2e/tessera-testcluster; build.sh makes it; ctest
#   runs it as realnode_e2e, label e2e, with REALNODE_CHART=1). Needs root, runc, busybox-static
#   and containernetworking-plugins (hack/install-deps.sh); builds containerd into $CONTAINERD_BIN (default
#   ~/.cache/tessera/containerd-<version>) on first use. SMOKE_KEEP=1 keeps the work folder;
#   REALNODE_DEMO_ONLY=1 stops after `tessera demo --real-node` (hack/run.sh's demo on a real node);
#   REALNODE_HOLD=1 keeps the node running after the checks (the kubeconfig and containerd's
#   socket are printed) until SIGTERM or SIGINT, then cleans up as usual.
#
# What it takes on a cgroup v1 host, root without CAP_SYS_RESOURCE (docs/design/0009): kubelet
# failCgroupV1: false, cgroupfs, failSwapOn: false; containerd restrict_oom_score_adj, enable_cdi,
# SystemdCgroup = false; the API server's --kubelet-preferred-address-types=InternalIP; a CNI
# config (without one the node stays NotReady); kube-controller-manager (the default
# ServiceAccount, the node's not-ready taint lifted).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
bin=${1:-${TESSERA_TESTCLUSTER:-$root/build/e2e/tessera-testcluster}}
# Not root: skipped (exit 77, ctest's SKIP_RETURN_CODE); CI runs as root.
[[ $(id -u) == 0 ]] || { echo "realnode-smoke: skipped: needs root (kubelet, containerd and runc run a real node)" >&2; exit 77; }
containerd_version=v2.2.9
cbin=${CONTAINERD_BIN:-$HOME/.cache/tessera/containerd-$containerd_version}
[[ -x "$bin" ]] || { echo "realnode-smoke: $bin not found; run test/e2e/harness/build.sh" >&2; exit 1; }
command -v runc >/dev/null || { echo "realnode-smoke: no runc (apt-get install runc)" >&2; exit 1; }
busybox=$(command -v busybox || true)
[[ -n "$busybox" ]] && file -L "$busybox" | grep -q "statically linked" ||
  { echo "realnode-smoke: no static busybox (apt-get install busybox-static)" >&2; exit 1; }

if [[ ! -x "$cbin/containerd" ]]; then
  GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
  echo "realnode-smoke: building containerd $containerd_version into $cbin" >&2
  mkdir -p "$cbin"
  GOBIN=$cbin GOFLAGS=-mod=mod "$GO" install -tags no_btrfs \
    "github.com/containerd/containerd/v2/cmd/containerd@$containerd_version" \
    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$containerd_version" \
    "github.com/containerd/containerd/v2/cmd/ctr@$containerd_version"
fi

w=$(mktemp -d /tmp/tessera-realnode.XXXXXX)
# kubelet's device-plugin folder is fixed at /var/lib/kubelet/device-plugins whatever --root-dir
# says; where this run makes it, it removes it (tessera-node serves its plugin wherever it exists).
made_var_lib_kubelet=0
proxy_started=0
[[ -e /var/lib/kubelet ]] || made_var_lib_kubelet=1
uid=""
bridge=""
export KUBECONFIG=$w/admin.kubeconfig
kubectl() { "$bin" kubectl "$@"; }
pids=()
cleanup() {
  local rc=$?
  # The processes of every pod of this cluster, by their pods' cgroups (kubelet's cgroupfs
  # driver names them pod<uid>): the pods' shims outlive containerd, their processes the shims.
  local uids
  uids=$(kubectl get pods -A -o jsonpath='{.items[*].metadata.uid}' 2>/dev/null || true)
  kubectl delete pod hello train prep neighbour whole sneaky share after nocdi unresolved drifter --grace-period=0 --wait=true --timeout=30s >/dev/null 2>&1 || true
  for u in ${uid:-} $uids; do
    for procs in /sys/fs/cgroup/*/kubepods*/*pod"$u"*/*/cgroup.procs /sys/fs/cgroup/*/kubepods*/*/*pod"$u"*/*/cgroup.procs; do
      [[ -f "$procs" ]] && { xargs -r kill -KILL <"$procs"; } 2>/dev/null || true
    done
  done
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 2
  # The pod's shims outlive containerd: stop them and their containers.
  pkill -KILL -f "containerd-shim-runc-v2 .*-address $w/" 2>/dev/null || true
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  grep -o " $w/[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  ip link delete "$bridge" 2>/dev/null || true
  ((proxy_started)) && "$bin" kube-proxy --cleanup >/dev/null 2>&1 || true
  ((made_var_lib_kubelet)) && rm -rf /var/lib/kubelet
  # kubelet's QoS cgroups, once empty.
  find /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods -depth -type d -exec rmdir {} \; 2>/dev/null || true
  if ((rc != 0)); then
    echo "realnode-smoke: FAILED; kubelet log tail:" >&2
    tail -n 30 "$w/kubelet.log" >&2 || true
  fi
  if [[ "${SMOKE_KEEP:-0}" == 1 || $rc -ne 0 ]]; then echo "realnode-smoke: kept $w" >&2; else rm -rf "$w"; fi
}
trap cleanup EXIT
wait_for() {  # SECONDS WHAT COMMAND...
  local limit=$1 what=$2
  shift 2
  for _ in $(seq $((limit * 2))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
  echo "realnode-smoke: $what did not happen within ${limit}s" >&2
  return 1
}

# The image: busybox-static, sleeping as its entrypoint (it is also the pod sandbox's image).
[[ -x /usr/lib/cni/bridge ]] || { echo "realnode-smoke: no CNI plugins (apt-get install containernetworking-plugins)" >&2; exit 1; }
mkdir -p "$w/rootfs/bin" "$w/rootfs/etc" "$w/rootfs/proc" "$w/rootfs/sys" "$w/rootfs/dev" "$w/cdi" "$w/cni"
# A bridge of its own per run (named after the folder), addresses from a documentation range.
bridge=tsr$(basename "$w" | tail -c 7 | tr -dc 'a-zA-Z0-9')
cat >"$w/cni/10-tessera.conflist" <<JSON
{"cniVersion": "1.0.0", "name": "tessera-realnode", "plugins": [
  {"type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "dataDir": "$w/cni-ipam", "ranges": [[{"subnet": "198.51.100.0/24"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "loopback"}]}
JSON
cp "$busybox" "$w/rootfs/bin/busybox"
for c in sh sleep cat echo id; do ln -s busybox "$w/rootfs/bin/$c"; done
image=tessera.dev/test/busybox:1
"$bin" oci-image --rootfs "$w/rootfs" --name $image --out "$w/busybox.tar" --entrypoint /bin/sleep,2147483647

cat >"$w/containerd.toml" <<TOML
version = 3
root = "$w/containerd/root"
state = "$w/containerd/state"
[grpc]
  address = "$w/containerd.sock"
[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = true
  cdi_spec_dirs = ["$w/cdi"]
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$w/cni"
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      SystemdCgroup = false
      BinaryName = "$(command -v runc)"
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "$image"
TOML
start_containerd() {  # CONFIG
  PATH=$cbin:$PATH "$cbin/containerd" --config "$1" >>"$w/containerd.log" 2>&1 &
  containerd_pid=$!
  pids+=($containerd_pid)
  wait_for 30 "containerd's socket" test -S "$w/containerd.sock"
}
start_containerd "$w/containerd.toml"
"$cbin/ctr" --address "$w/containerd.sock" -n k8s.io images import "$w/busybox.tar" >/dev/null

ip=$(hostname -I | awk '{print $1}')
"$bin" up --dir "$w/cp" --kubeconfig "$KUBECONFIG" --advertise-address "$ip" \
  --apiserver-arg=--kubelet-preferred-address-types=InternalIP >"$w/up.log" 2>&1 &
pids+=($!)
wait_for 120 "the control plane" kubectl get --raw /readyz
"$bin" kube-controller-manager --kubeconfig "$KUBECONFIG" --leader-elect=false \
  --service-account-private-key-file "$w/cp/pki/sa.key" --root-ca-file "$w/cp/pki/ca.crt" \
  --secure-port=0 >"$w/kcm.log" 2>&1 &
pids+=($!)

# kube-proxy (iptables): Services' ClusterIPs for the pods and the host, the API server's
# "kubernetes" Service included. Its rules are removed at cleanup (kube-proxy --cleanup).
"$bin" kube-proxy --kubeconfig "$KUBECONFIG" --hostname-override realnode --proxy-mode iptables \
  --cluster-cidr 198.51.100.0/24 --conntrack-max-per-core 0 --iptables-localhost-nodeports=false \
  --metrics-bind-address "127.0.0.1:$((20000 + RANDOM % 20000))" \
  --healthz-bind-address "127.0.0.1:$((40000 + RANDOM % 20000))" >"$w/kube-proxy.log" 2>&1 &
pids+=($!)
proxy_started=1
cat >"$w/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
address: 0.0.0.0
readOnlyPort: 0
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$w/containerd.sock
enforceNodeAllocatable: []
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
podLogsDir: $w/pod-logs
YAML
forget_pid() {  # PID: an ended child's PID may be reused, so cleanup must not signal it
  local p kept=()
  for p in "${pids[@]}"; do [[ $p == "$1" ]] || kept+=("$p"); done
  pids=("${kept[@]}")
}
start_kubelet() {
  "$bin" real-kubelet --config "$w/kubelet.yaml" --kubeconfig "$KUBECONFIG" --root-dir "$w/kubelet" \
    --cert-dir "$w/kubelet/pki" --hostname-override realnode --node-ip "$ip" >>"$w/kubelet.log" 2>&1 &
  kubelet_pid=$!
  pids+=($kubelet_pid)
}
start_kubelet
wait_for 60 "node realnode registering" kubectl get node realnode
wait_for 90 "node realnode Ready" sh -c "'$bin' kubectl get node realnode -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
wait_for 60 "the default ServiceAccount (kube-controller-manager)" kubectl get serviceaccount default

kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: hello, namespace: default}
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 0
  containers:
  - name: main
    image: $image
    imagePullPolicy: Never
    command: ["sh", "-c", "echo hello from a real container; cat /proc/self/cgroup; sleep 3600"]
YAML
wait_for 60 "pod hello Running" sh -c "'$bin' kubectl get pod hello -o jsonpath='{.status.phase}' | grep -qx Running"
uid=$(kubectl get pod hello -o jsonpath='{.metadata.uid}')
pod_ip=$(kubectl get pod hello -o jsonpath='{.status.podIP}')
[[ "$pod_ip" == 198.51.100.* ]] || { echo "realnode-smoke: pod IP \"$pod_ip\" is not from the CNI bridge" >&2; exit 1; }
logs=$(kubectl logs hello)
grep -q "hello from a real container" <<<"$logs" || { echo "realnode-smoke: logs: $logs" >&2; exit 1; }
grep -q "pod$uid" <<<"$logs" || { echo "realnode-smoke: the cgroup does not name pod$uid: $logs" >&2; exit 1; }
[[ "$(kubectl exec hello -- echo exec-works)" == exec-works ]] || { echo "realnode-smoke: exec failed" >&2; exit 1; }
echo "realnode-smoke: OK (node Ready; pod scheduled and Running on a real kubelet + containerd $containerd_version + $(runc --version | head -1), IP $pod_ip; logs, exec, cgroup pod$uid)"
# REALNODE_DRA=1 (docs/design/0022): the chart's tessera-node serves the DRA driver
# gpu.tessera.dev to the real kubelet. Its ResourceSlice reaches the API server; two pods, each
# with a ResourceClaim of memory and cores (class shared.gpu.tessera.dev), are allocated by
# kube-scheduler's own allocator, prepared by kubelet through the plugin (NodePrepareResources),
# started by containerd with the claim's CDI device, and each is refused at its own cap; a claim
# no GPU can hold leaves its pod Pending with the reason; a deleted pod's claim is unprepared.
dra_checks() {
  slice() { kubectl get resourceslice realnode-gpu.tessera.dev -o jsonpath='{.spec.devices[*].name}'; }
  has_slice() { [[ -n "$(slice)" ]]; }
  wait_for 60 "the node's ResourceSlice (tessera-node's DRA driver)" has_slice ||
    { kubectl logs -n tessera-system -l app.kubernetes.io/component=node --tail 30 >&2; exit 1; }
  registered() { grep -q "kubelet registered the DRA plugin" <(kubectl logs -n tessera-system -l app.kubernetes.io/component=node --tail 500); }
  wait_for 60 "kubelet registering the DRA plugin" registered ||
    { tail -n 30 "$w/kubelet.log" >&2; exit 1; }
  dra_claim() {  # NAME MEMORY CORES [COUNT]: a ResourceClaim of COUNT GPUs (default 1)
    cat <<YAML
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: $1, namespace: default}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: shared.gpu.tessera.dev
        count: ${4:-1}
        capacity: {requests: {memory: "$2", cores: "$3"}}
YAML
  }
  dra_pod() {  # NAME MEMORY CORES COMMAND [COUNT]: a ResourceClaim and a pod of the CUDA client using it
    kubectl apply -f - >/dev/null <<YAML
$(dra_claim "$1" "$2" "$3" "${5:-1}")
---
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default}
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 0
  resourceClaims: [{name: gpu, resourceClaimName: $1}]
  volumes: [{name: fakegpu, hostPath: {path: $w/fakegpu, type: Directory}}]
  containers:
  - name: main
    image: tessera.dev/test/cuda-client:1
    imagePullPolicy: Never
    command: ["sh", "-c", "$4"]
    env: [{name: LD_LIBRARY_PATH, value: $w/driver}, {name: TESSERA_FAKE_DEV_DIR, value: /dev},
          {name: TESSERA_FAKE_STATE, value: /fakegpu/state}]
    resources: {claims: [{name: gpu}]}
    volumeMounts: [{name: fakegpu, mountPath: /fakegpu}]
YAML
  }
  # Each stays running after its checks: kubelet unprepares a claim once its pod has ended.
  dra_pod infer 1Gi 20 "hook_client dlopen alloc plain 134217728; cat /etc/tessera/limits; echo checked; sleep 3600"
  dra_pod tune 2Gi 30 "hook_client dlopen alloc plain 134217728; cat /etc/tessera/limits; echo checked; sleep 3600"
  # A claim no GPU can hold is refused at admission (tessera-scheduler's claims webhook); one the
  # node can never hold (3 GPUs of its 2) is admitted and left Pending by kube-scheduler.
  local refused
  if refused=$(dra_claim huge 64Gi 10 | kubectl apply -f - 2>&1); then
    echo "realnode-smoke: a 64Gi claim was admitted on 16Gi GPUs" >&2; exit 1
  fi
  grep -q "claims.validate.tessera.dev.*ResourceClaim default/huge: spec.devices.requests\[0\].exactly.capacity.requests.memory: 64.00 GiB is more than any GPU in the cluster has" <<<"$refused" ||
    { echo "realnode-smoke: the 64Gi claim was refused, but not by the claims webhook: $refused" >&2; exit 1; }
  dra_pod giant 1Gi 10 "echo never" 3
  local pod log
  for pod in infer tune; do
    checked() { kubectl logs "$1" 2>/dev/null | grep -qx checked; }
    wait_for 90 "pod $pod (DRA) running its checks" checked "$pod" ||
      { kubectl describe pod "$pod" 2>&1 | tail -n 25 >&2;
        kubectl logs -n tessera-system -l app.kubernetes.io/component=node --tail 30 >&2; exit 1; }
  done
  for pod in "infer 1073741824 20" "tune 2147483648 30"; do
    set -- $pod
    log=$(kubectl logs "$1")
    grep -q "allocated=$2 last_result=2" <<<"$log" && grep -q "total=$2" <<<"$log" &&
      grep -q " default/$1 claim/$1" <<<"$log" && grep -q "cores=$3" <<<"$log" ||
      { echo "realnode-smoke: DRA pod $1 was not held at its claim's cap $2 and share $3; its log:" >&2;
        echo "$log" >&2; exit 1; }
  done
  pending() {
    kubectl get pod giant -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}' | grep -q claim
  }
  wait_for 60 "pod giant (3 GPUs of the node's 2) Pending with the reason" pending ||
    { kubectl describe pod giant 2>&1 | tail -n 15 >&2; exit 1; }
  # The pod deleted: kubelet unprepares its claim and the slot's files go.
  local uid
  uid=$(kubectl get resourceclaim infer -o jsonpath='{.metadata.uid}')
  [[ -d "$w/state/slots/claim-$uid" ]] || { echo "realnode-smoke: no slot claim-$uid for claim infer" >&2; exit 1; }
  kubectl delete pod infer --wait=false >/dev/null
  gone() { [[ ! -e "$w/state/slots/claim-$uid" ]]; }
  wait_for 60 "claim infer unprepared (its slot removed)" gone || { tail -n 20 "$w/kubelet.log" >&2; exit 1; }
  echo "realnode-smoke: DRA OK (ResourceSlice $(slice); claims of 1Gi/20 % and 2Gi/30 % allocated by kube-scheduler, prepared by the real kubelet through gpu.tessera.dev, each container refused at its own cap; a 64Gi claim refused at admission; a claim of 3 GPUs Pending: $(kubectl get pod giant -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}' | cut -c1-100); an unprepared claim's slot removed)"
}
if [[ "${REALNODE_CHART:-0}" == 1 ]]; then
  build=${TESSERA_BUILD_DIR:-$root/build/dev}
  for f in cmd/tessera-node/tessera-node cmd/tessera/tessera test/integration/hook_client \
    test/fakes/lib/libnvidia-ml.so.1 test/fakes/lib/libcuda.so.1 src/hook/libtessera-cuda.so; do
    [[ -e "$build/$f" ]] || { echo "realnode-smoke: no $f in $build (TESSERA_BUILD_DIR)" >&2; exit 1; }
  done
  helm=$("$root/hack/helm.sh")
  TESSERA_BUILD_DIR=$build "$root/hack/build-images.sh" "$w/images" >"$w/images.log" 2>&1 ||
    { tail -n 20 "$w/images.log" >&2; exit 1; }
  for archive in "$w"/images/*.oci.tar; do
    "$cbin/ctr" --address "$w/containerd.sock" -n k8s.io images import "$archive" >/dev/null
  done
  # The node's "driver": the fake libcuda and NVML in a host folder of this run, mounted into the
  # agent at the same path (the CDI specs it writes name their files there), and device nodes of
  # the run's own under $w/dev (the chart's driver.devRoot): character devices of the NVIDIA
  # major with no driver behind them, so a container they are given to opens them with ENXIO and
  # any other container is refused them by its device cgroup.
  mkdir -p "$w/driver" "$w/state" "$w/lib" "$w/dev" "$w/fakegpu"
  # The fake GPUs' usage, shared by every container's fake driver and the agent's fake NVML as a
  # real GPU's is by the kernel driver (TESSERA_FAKE_STATE; the NVML reports host PIDs), and the
  # driver's per-process SM samples (TESSERA_FAKE_NVML_UTIL_FILE), written by this script.
  install -m 0666 /dev/null "$w/fakegpu/state"
  install -m 0666 /dev/null "$w/fakegpu/util"
  cp -L "$build/test/fakes/lib/libcuda.so.1" "$build/test/fakes/lib/libnvidia-ml.so.1" "$w/driver/"
  for n in 0 1; do mknod "$w/dev/nvidia$n" c 195 "$n"; done
  mknod "$w/dev/nvidiactl" c 195 255
  mknod "$w/dev/nvidia-uvm" c 195 254
  mknod "$w/dev/nvidia-uvm-tools" c 195 253
  # Two more images, written like the busybox one: kube-scheduler for the chart's scheduler pod
  # (the harness's multi-call binary, named kube-scheduler), and a CUDA client (the preload
  # library's integration client) for GPU pods. Each with its shared-library closure and loader.
  closure() {  # ROOTFS FILE: the libraries the loader maps for FILE, at their paths in ROOTFS
    local lib
    for lib in $(env -u LD_PRELOAD ldd "$2" 2>/dev/null | grep -o '/[^ ]*'); do
      [[ -e "$1$lib" ]] || { mkdir -p "$1$(dirname "$lib")" && cp -L "$lib" "$1$lib"; }
    done
  }
  stage() {  # ROOTFS FILE AS: FILE at AS in ROOTFS, with its closure
    mkdir -p "$1$(dirname "$3")"
    cp -L "$2" "$1$3"
    closure "$1" "$2"
  }
  kube_tag=$("$bin" version | awk '$1 == "k8s.io/kubernetes" {print $2}')
  stage "$w/ks-rootfs" "$bin" /usr/local/bin/kube-scheduler
  "$bin" oci-image --rootfs "$w/ks-rootfs" --name "tessera.dev/test/kube-scheduler:$kube_tag" \
    --out "$w/kube-scheduler.tar" --entrypoint /usr/local/bin/kube-scheduler
  stage "$w/client-rootfs" "$build/test/integration/hook_client" /usr/local/bin/hook_client
  stage "$w/client-rootfs" "$busybox" /bin/busybox
  # What the mounted preload library and driver need of the image's glibc (libpthread, libdl:
  # the preload library is built for glibc 2.28, where they are libraries of their own).
  closure "$w/client-rootfs" "$build/src/hook/libtessera-cuda.so"
  closure "$w/client-rootfs" "$w/driver/libcuda.so.1"
  for c in sh cat mknod echo ls sed sleep id; do ln -s busybox "$w/client-rootfs/bin/$c"; done
  mkdir -p "$w/client-rootfs/etc" "$w/client-rootfs/dev" "$w/client-rootfs/proc"
  "$bin" oci-image --rootfs "$w/client-rootfs" --name tessera.dev/test/cuda-client:1 \
    --out "$w/cuda-client.tar" --entrypoint /bin/sh
  rm -rf "$w/ks-rootfs" "$w/client-rootfs"
  for archive in "$w/kube-scheduler.tar" "$w/cuda-client.tar"; do
    "$cbin/ctr" --address "$w/containerd.sock" -n k8s.io images import "$archive" >/dev/null
    rm -f "$archive"
  done
  # REALNODE_DRA=1: the chart's DRA path (node.allocationPath dra) instead of the device plugin.
  allocation_path=device-plugin
  [[ "${REALNODE_DRA:-0}" == 1 ]] && allocation_path=dra
  # The chart's default node selector, as NVIDIA's GPU feature discovery would label a GPU node.
  kubectl label node realnode nvidia.com/gpu.present=true >/dev/null
  cat >"$w/values.yaml" <<YAML
node:
  runtimeClassName: ""
  image: {pullPolicy: Never}
  hostPaths:
    state: $w/state
    devicePlugins: /var/lib/kubelet/device-plugins
    podResources: $w/kubelet/pod-resources
    cdi: $w/cdi
    draPlugin: $w/kubelet/plugins/gpu.tessera.dev
    pluginsRegistry: $w/kubelet/plugins_registry
  allocationPath: ${allocation_path}
  hookLibrary: {hostPath: $w/lib/libtessera-cuda.so}
  driver: {libDir: $w/driver, mountLibDir: true, devRoot: $w}
  extraEnv:
    - {name: TESSERA_FAKE_STATE, value: $w/fakegpu/state}
    - {name: TESSERA_FAKE_NVML_UTIL_FILE, value: $w/fakegpu/util}
  extraVolumes:
    - {name: fakegpu, hostPath: {path: $w/fakegpu, type: Directory}}
  extraVolumeMounts:
    - {name: fakegpu, mountPath: $w/fakegpu}
scheduler:
  image: {pullPolicy: Never}
kubeScheduler:
  image: {repository: tessera.dev/test/kube-scheduler, tag: "$kube_tag", pullPolicy: Never}
YAML
  "$helm" install tessera "$root/deployments/helm/tessera" --kubeconfig "$KUBECONFIG" \
    --namespace tessera-system --create-namespace --values "$w/values.yaml" >"$w/helm.log" 2>&1 ||
    { cat "$w/helm.log" >&2; exit 1; }
  # component_up COMPONENT JSONPATH VALUE WHAT: waits until the chart's pods of COMPONENT show
  # VALUE at JSONPATH; if they do not, shows them and fails.
  component_is() {
    kubectl get pods -n tessera-system -l "app.kubernetes.io/component=$1" -o jsonpath="$2" | grep -qx "$3"
  }
  component_up() {
    wait_for 120 "$4" component_is "$1" "$2" "$3" && return 0
    kubectl get pods -n tessera-system -o wide >&2 || true
    kubectl describe pods -n tessera-system -l "app.kubernetes.io/component=$1" 2>&1 | tail -n 30 >&2 || true
    exit 1
  }
  component_up node '{.items[*].status.phase}' Running "the chart's tessera-node pod Running on realnode"
  if [[ $allocation_path == dra ]]; then
    # The webhooks (failurePolicy Fail) admit every pod: the scheduler's pod first.
    component_up scheduler '{.items[*].status.conditions[?(@.type=="Ready")].status}' True \
      "the chart's scheduler pod Ready"
    dra_checks
    echo "realnode-smoke: DRA done (REALNODE_DRA=1: the device-plugin checks skipped); cleaning up"
    exit 0
  fi
  slots() { kubectl get node realnode -o jsonpath='{.status.capacity.tessera\.dev/gpu-slot}'; }
  has_slots() { [[ "$(slots)" =~ ^[1-9][0-9]*$ ]]; }
  wait_for 60 "realnode advertising tessera.dev/gpu-slot (the device plugin registered with kubelet)" has_slots
  [[ -f "$w/lib/libtessera-cuda.so" ]] ||
    { echo "realnode-smoke: the init containers did not install the preload library" >&2; exit 1; }
  # The agent reached the API server through the "kubernetes" Service (kube-proxy): its inventory.
  inventory() { kubectl get node realnode -o jsonpath='{.metadata.annotations.tessera\.dev/gpu-inventory}'; }
  has_inventory() { [[ -n "$(inventory)" ]]; }
  wait_for 60 "the agent's inventory on the Node (tessera.dev/gpu-inventory)" has_inventory
  echo "realnode-smoke: chart OK (tessera-node from its image on realnode; $(slots) tessera.dev/gpu-slot registered with the real kubelet; preload library installed; inventory of $(inventory | grep -o '"uuid"' | wc -l) GPUs published through kube-proxy)"

  # The chart's scheduler half: tessera-scheduler and its kube-scheduler in one pod of the
  # Deployment, the webhooks behind their Service (failurePolicy Fail: a GPU pod below is
  # admitted only through them).
  component_up scheduler '{.items[*].status.conditions[?(@.type=="Ready")].status}' True \
    "the chart's scheduler pod Ready"
  # The demo on this real node (issue #24 part 5): `tessera demo --real-node` runs the seeds'
  # showdown as real pods of the CUDA client image, each process filling its own cap. The pod
  # template gives them what this node's fake driver needs (a real GPU node needs only the image).
  cat >"$w/demo-pod.json" <<JSON
{"image": "tessera.dev/test/cuda-client:1", "client": "/usr/local/bin/hook_client",
 "schedulerName": "tessera",
 "env": [{"name": "LD_LIBRARY_PATH", "value": "$w/driver"}, {"name": "TESSERA_FAKE_DEV_DIR", "value": "/dev"},
         {"name": "TESSERA_FAKE_STATE", "value": "/fakegpu/state"}],
 "volumes": [{"name": "fakegpu", "hostPath": {"path": "$w/fakegpu", "type": "Directory"}}],
 "volumeMounts": [{"name": "fakegpu", "mountPath": "/fakegpu"}]}
JSON
  "$build/cmd/tessera/tessera" demo --real-node "$KUBECONFIG" --pod-template "$w/demo-pod.json" |
    tee "$w/demo.log" ||
    { echo "realnode-smoke: tessera demo --real-node failed" >&2; exit 1; }
  grep -qE "^([1-9][0-9]*) of \1 placed pods were refused at their own cap" "$w/demo.log" ||
    { echo "realnode-smoke: tessera demo --real-node: not every placed pod refused at its cap" >&2; exit 1; }
  if [[ "${REALNODE_DEMO_ONLY:-0}" == 1 ]]; then
    echo "realnode-smoke: demo done (REALNODE_DEMO_ONLY=1: the other checks skipped); cleaning up"
    exit 0
  fi
  # GPU pods as real containers (the fake driver shows a container the GPUs whose device nodes it
  # may open, TESSERA_FAKE_DEV_DIR): two tenants with their own memory caps, placed by the chart's
  # kube-scheduler and its extender (a signed decision), admitted by its webhooks, given a slot by
  # the device plugin and the GPU by its CDI device. Each fills its cap; then each opens the GPU
  # device nodes it sees. A third pod, with no GPU, makes the node of GPU 0 itself and is refused.
  # run_pod NAME COMMAND [LIMITS [SECURITY_CONTEXT [SCHEDULER]]]: a pod of the CUDA client image
  # that runs COMMAND once. With LIMITS (a YAML flow map of tessera.dev resources) it is a GPU pod
  # placed by the chart's scheduler (or SCHEDULER), with the fake driver's folder on its library path and the fake driver
  # showing it the GPUs whose device nodes it may open (TESSERA_FAKE_DEV_DIR).
  run_pod() {
    local scheduler=default-scheduler env="[]" resources="{}" security=${4:-"{}"} volumes="[]" mounts="[]"
    if [[ -n ${3:-} ]]; then
      scheduler=${5:-tessera}
      env="[{name: LD_LIBRARY_PATH, value: $w/driver}, {name: TESSERA_FAKE_DEV_DIR, value: /dev},
            {name: TESSERA_FAKE_STATE, value: /fakegpu/state}]"
      resources="{limits: $3}"
      volumes="[{name: fakegpu, hostPath: {path: $w/fakegpu, type: Directory}}]"
      mounts="[{name: fakegpu, mountPath: /fakegpu}]"
    fi
    kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default}
spec:
  schedulerName: $scheduler
  restartPolicy: Never
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 0
  securityContext: $security
  volumes: $volumes
  containers:
  - name: main
    image: tessera.dev/test/cuda-client:1
    imagePullPolicy: Never
    command: ["sh", "-c", "$2"]
    env: $env
    resources: $resources
    volumeMounts: $mounts
YAML
  }
  done_pod() { [[ "$(kubectl get pod "$1" -o jsonpath='{.status.phase}')" =~ ^(Succeeded|Failed)$ ]]; }
  finish() {  # POD...: each pod ended (Succeeded or Failed)
    local pod
    for pod; do
      wait_for 90 "pod $pod finishing" done_pod "$pod" ||
        { kubectl describe pod "$pod" 2>&1 | tail -n 25 >&2; exit 1; }
    done
  }
  opens='cat /dev/nvidia[0-9]* 2>&1 | sed s/^/open:/'
  run_pod train "hook_client dlopen alloc plain 134217728; $opens; sed -n '/tessera.dev.gpu/s/.*/spec:found/p' /etc/tessera-cdi.json" "{tessera.dev/gpu-memory: 1Gi}"
  run_pod prep "hook_client dlopen alloc plain 134217728; $opens" "{tessera.dev/gpu-memory: 2Gi}"
  run_pod neighbour "ls /dev/nvidia* 2>&1 | sed s/^/ls:/; mknod /dev/nvidia0 c 195 0 && cat /dev/nvidia0 2>&1 | sed s/^/open:/"
  finish train prep neighbour
  expect_log() {  # POD TEXT WHAT
    local log
    log=$(kubectl logs "$1")
    grep -qF -- "$2" <<<"$log" || { echo "realnode-smoke: pod $1: $3; its log:" >&2; echo "$log" >&2; exit 1; }
  }
  for pod in train prep; do
    kubectl get pod $pod -o jsonpath='{.metadata.annotations}' | grep -q 'tessera.dev/decision' ||
      { echo "realnode-smoke: pod $pod has no tessera.dev decision" >&2; exit 1; }
    expect_log $pod "context_result=0" "no CUDA context through the fake driver the CDI device mounted"
    expect_log $pod "open:cat: can't open '/dev/nvidia" "no GPU device node in the container"
    expect_log $pod "No such device or address" "its GPU's device node was not openable (the device cgroup should allow it)"
  done
  # The caps, each in its own container (training refused at 1 GiB, preprocessing at its 2 GiB),
  # and cuMemGetInfo's total is the cap.
  expect_log train "allocated=1073741824 last_result=2" "not refused at its 1 GiB cap"
  expect_log train "total=1073741824" "cuMemGetInfo does not show the 1 GiB cap"
  expect_log train "spec:found" "no CDI spec of its own at /etc/tessera-cdi.json"
  expect_log prep "allocated=2147483648 last_result=2" "not refused at its 2 GiB cap"
  expect_log neighbour "ls:ls: /dev/nvidia*: No such file or directory" "a pod without a GPU sees GPU device nodes"
  expect_log neighbour "Operation not permitted" "a pod without a GPU opened a GPU device node it made"
  # A whole GPU (tessera.dev/gpu: 1, mode exclusive): the webhook gives it the slot handle too, and
  # the device plugin hands it its GPU's device node through the slot's CDI device; the fake
  # driver then shows it exactly that GPU, all of its memory its cap.
  run_pod whole "$opens; hook_client dlopen alloc plain 1073741824" "{tessera.dev/gpu: 1}"
  finish whole
  expect_log whole "context_result=0" "no CUDA context on its whole GPU"
  expect_log whole "allocated=17179869184 last_result=2" "not given all 16 GiB of its GPU"
  [[ $(kubectl logs whole | grep -c "^open:") == 1 ]] ||
    { echo "realnode-smoke: pod whole does not see exactly one GPU device node:" >&2; kubectl logs whole >&2; exit 1; }
  echo "realnode-smoke: whole GPU OK (pod whole got one GPU's device node through its slot's CDI device and all 16 GiB)"
  # Bad input: a slot asked for directly, past tessera's scheduler (no decision). The device
  # plugin refuses it a GPU, the pod's Event says why, and its container never runs.
  # told / expect_told POD REASON: an Event of REASON on POD (expect_told waits for it, and if it
  # does not come shows the pod and the agent's log); event_of POD REASON: its message.
  told() {  # POD REASON
    kubectl get events -n default --field-selector "involvedObject.name=$1,reason=$2" \
      -o jsonpath='{.items[*].message}' | grep -q .
  }
  expect_told() {  # POD REASON
    wait_for 60 "the Event $2 on pod $1" told "$1" "$2" && return 0
    kubectl describe pod "$1" 2>&1 | tail -n 25 >&2
    kubectl logs -n tessera-system -l app.kubernetes.io/component=node --tail 20 >&2 || true
    exit 1
  }
  event_of() { kubectl get events -n default --field-selector "involvedObject.name=$1,reason=$2" -o jsonpath='{.items[0].message}'; }
  run_pod sneaky "echo ran" "{tessera.dev/gpu-slot: 1}" "{}" default-scheduler
  expect_told sneaky TesseraDecisionRejected
  ! kubectl logs sneaky 2>/dev/null | grep -qx ran ||
    { echo "realnode-smoke: pod sneaky ran without a decision" >&2; exit 1; }
  echo "realnode-smoke: no decision OK (pod sneaky: $(event_of sneaky TesseraDecisionRejected | cut -c1-120))"
  # A compute share governed by tessera-node's arbiter, in a container running as a user other
  # than root: 30 % of the GPU's time for kernels of 200 us; the agent's metrics (scraped from
  # its pod) show the container's launches, its busy time and the time its share held it.
  run_pod share "id -u; hook_client dlopen spin 4 200; echo spun; sleep 3600" \
    "{tessera.dev/gpu-memory: 1Gi, tessera.dev/gpu-cores: 30}" \
    "{runAsUser: 1000, runAsGroup: 1000, runAsNonRoot: true}"
  spun() { kubectl logs share 2>/dev/null | grep -qx spun; }
  if ! wait_for 90 "pod share running its kernels" spun; then
    kubectl describe pod share 2>&1 | tail -n 25 >&2; kubectl logs share >&2 || true
    exit 1
  fi
  expect_log share "context_result=0" "no CUDA context as user 1000"
  expect_log share "sync_errors=0" "its kernels failed as user 1000"
  agent_ip=$(kubectl get pods -n tessera-system -l app.kubernetes.io/component=node -o jsonpath='{.items[0].status.podIP}')
  metric() {  # NAME: the value of NAME for pod share's container
    "$busybox" wget -qO- "http://$agent_ip:9479/metrics" | grep "^$1{" | grep 'pod="share"' | awk '{print $NF}'
  }
  positive() { awk -v v="$(metric "$1")" 'BEGIN {exit !(v ~ /^[0-9.e+-]+$/ && v + 0 > 0)}'; }
  # The agent reads the region every few seconds: wait until it has seen the launches.
  wait_for 30 "the agent's metrics counting pod share's launches" positive tessera_container_gpu_launches_total ||
    { "$busybox" wget -qO- "http://$agent_ip:9479/metrics" | grep share >&2; exit 1; }
  for m in tessera_container_gpu_busy_seconds_total tessera_container_gpu_throttled_seconds_total; do
    positive $m || { echo "realnode-smoke: pod share: $m is \"$(metric $m)\", not above 0" >&2; exit 1; }
  done
  [[ "$(metric tessera_container_gpu_compute_share_target_ratio)" == 0.3 ]] ||
    { echo "realnode-smoke: pod share's target ratio is \"$(metric tessera_container_gpu_compute_share_target_ratio)\", not 0.3" >&2; exit 1; }
  echo "realnode-smoke: compute share OK (pod share as user 1000: $(metric tessera_container_gpu_launches_total) launches, busy $(metric tessera_container_gpu_busy_seconds_total) s, held for its 30 % share $(metric tessera_container_gpu_throttled_seconds_total) s)"
  # A missing limits file under a running container (the node's files removed): the container's
  # next process is refused the GPU, not run without limits (the library fails closed); the
  # agent's clean-up pass, finding it missing twice in a row (5 s apart), writes it again from
  # the decision and tells the pod (TesseraLimitsMissing); the next process has its cap.
  share_limits=$(grep -l " default/share " "$w"/state/slots/*/etc/limits)
  mv "$share_limits" "$share_limits.away"
  refused=$(kubectl exec share -- hook_client dlopen alloc plain 134217728 2>&1 || true)
  grep -q "limits file /etc/tessera/limits is missing; enforcement fail-closed" <<<"$refused" &&
    ! grep -q "allocated=[1-9]" <<<"$refused" ||
    { echo "realnode-smoke: without its limits file pod share's process was not refused:" >&2; echo "$refused" >&2; exit 1; }
  expect_told share TesseraLimitsMissing
  grep -q " default/share " "$share_limits" ||
    { echo "realnode-smoke: pod share's limits file was not written again" >&2; exit 1; }
  rm -f "$share_limits.away"
  capped=$(kubectl exec share -- hook_client dlopen alloc plain 134217728 2>&1 || true)
  grep -q "allocated=1073741824 last_result=2" <<<"$capped" ||
    { echo "realnode-smoke: pod share's next process was not capped at 1 GiB:" >&2; echo "$capped" >&2; exit 1; }
  echo "realnode-smoke: missing limits file OK (a new process of pod share was refused the GPU; $(event_of share TesseraLimitsMissing | cut -c1-90)...; the next one capped at 1 GiB)"
  # Compute drift attributed by the container's cgroup: a process of pod drifter holds GPU
  # memory (the agent's NVML lists it by its host PID, as the real driver does) and the driver's
  # samples show it on 90 % of the SMs against its 20 % share; the agent finds its pod by the
  # process's cgroup and tells it (TesseraComputeDrift), acting per its tier's onDrift.
  run_pod drifter "hook_client dlopen hold 134217728" "{tessera.dev/gpu-memory: 1Gi, tessera.dev/gpu-cores: 20}"
  holding() { kubectl logs drifter 2>/dev/null | grep -q "hold_result=0"; }
  wait_for 90 "pod drifter holding GPU memory" holding || { kubectl describe pod drifter 2>&1 | tail -n 25 >&2; exit 1; }
  drifter_uid=$(kubectl get pod drifter -o jsonpath='{.metadata.uid}')
  drifter_pid=""
  for procs in /sys/fs/cgroup/pids/kubepods*/*pod"$drifter_uid"*/*/cgroup.procs /sys/fs/cgroup/pids/kubepods*/*/*pod"$drifter_uid"*/*/cgroup.procs; do
    [[ -f "$procs" ]] || continue
    for p in $(cat "$procs"); do [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == hook_client ]] && drifter_pid=$p; done
  done
  [[ -n "$drifter_pid" ]] || { echo "realnode-smoke: no hook_client process in pod drifter's cgroup" >&2; exit 1; }
  drifter_gpu=$(sed -n 's/^device GPU-face0000-0000-0000-0000-0000000000\([0-9a-f][0-9a-f]\) .*/\1/p' "$(grep -l " default/drifter " "$w"/state/slots/*/etc/limits)")
  [[ -n "$drifter_gpu" ]] || { echo "realnode-smoke: pod drifter's limits name no fake GPU" >&2; exit 1; }
  ( for _ in $(seq 40); do echo "$((16#$drifter_gpu)) $drifter_pid $(date +%s%6N) 90" >>"$w/fakegpu/util"; sleep 1; done ) &
  sampler=$!
  pids+=($sampler)
  expect_told drifter TesseraComputeDrift
  kill "$sampler" 2>/dev/null || true
  echo "realnode-smoke: compute drift by cgroup OK (host pid $drifter_pid of pod drifter: $(event_of drifter TesseraComputeDrift | cut -c1-160))"
  kubectl delete pod drifter --grace-period=0 --wait=true >/dev/null
  # An agent restart under a running GPU container: the DaemonSet's new pod registers the plugin
  # again and keeps governing the container (its counters come from the container's region).
  launches_before=$(metric tessera_container_gpu_launches_total)
  kubectl delete pod -n tessera-system -l app.kubernetes.io/component=node --wait=true >/dev/null
  component_up node '{.items[*].status.phase}' Running "the agent's new pod Running"
  agent_ip=$(kubectl get pods -n tessera-system -l app.kubernetes.io/component=node -o jsonpath='{.items[0].status.podIP}')
  wait_for 60 "the new agent's metrics of pod share" positive tessera_container_gpu_launches_total ||
    { echo "realnode-smoke: after the agent's restart its metrics lost pod share" >&2; exit 1; }
  [[ "$(kubectl get pod share -o jsonpath='{.status.phase}')" == Running ]] ||
    { echo "realnode-smoke: pod share did not survive the agent's restart" >&2; exit 1; }
  echo "realnode-smoke: agent restart OK (pod share kept running; the new agent counts its $(metric tessera_container_gpu_launches_total) launches, $launches_before before)"
  # A kubelet restart under running containers: kubelet's device manager starts empty, so the
  # plugin must register again (the Node's gpu-slot capacity comes back) and a new GPU pod gets a
  # slot and its cap.
  kill -TERM "$kubelet_pid"
  wait "$kubelet_pid" 2>/dev/null || true
  forget_pid "$kubelet_pid"
  start_kubelet
  wait_for 90 "node realnode Ready after kubelet's restart" sh -c "'$bin' kubectl get node realnode -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
  allocatable() { kubectl get node realnode -o jsonpath='{.status.allocatable.tessera\.dev/gpu-slot}'; }
  has_allocatable() { [[ "$(allocatable)" =~ ^[1-9][0-9]*$ ]]; }
  wait_for 90 "tessera.dev/gpu-slot allocatable again after kubelet's restart (the plugin registered again)" has_allocatable
  run_pod after "hook_client dlopen alloc plain 134217728" "{tessera.dev/gpu-memory: 1Gi}"
  finish after
  expect_log after "allocated=1073741824 last_result=2" "not refused at its 1 GiB cap after kubelet's restart"
  if ! wait_for 30 "tessera.dev/gpu-slot still allocatable after pod after" has_allocatable; then
    kubectl logs -n tessera-system -l app.kubernetes.io/component=node --tail 40 >&2 || true
    grep -i "tessera.dev\|device-plugin\|devicemanager\|endpoint" "$w/kubelet.log" | tail -n 30 >&2
    exit 1
  fi
  [[ "$(kubectl get pod share -o jsonpath='{.status.phase}')" == Running ]] ||
    { echo "realnode-smoke: pod share did not survive kubelet's restart" >&2; exit 1; }
  echo "realnode-smoke: kubelet restart OK (the plugin registered again: $(allocatable) slots allocatable; pod after capped at 1 GiB; pod share kept running)"
  # A runtime that ignores CDI (containerd restarted with enable_cdi = false, as containerd 1.6
  # behaves): kubelet still mounts the slot's limits and the library, but the GPU's device nodes
  # and the driver come only through the CDI device, so the container has no GPU; tessera-node
  # finds the device's spec not mounted in it and says why (TesseraCdiNotApplied). Then a runtime
  # that cannot find the spec (its spec folders are not tessera-node's): the container is never
  # created, and tessera-node says where the spec is (TesseraCdiUnresolved). containerd restarts
  # under the running GPU container of pod share each time.
  restart_containerd() {  # CONFIG
    kill -TERM "$containerd_pid"
    wait "$containerd_pid" 2>/dev/null || true
    forget_pid "$containerd_pid"
    rm -f "$w/containerd.sock"
    start_containerd "$1"
  }
  sed 's/enable_cdi = true/enable_cdi = false/' "$w/containerd.toml" >"$w/containerd-nocdi.toml"
  grep -q "enable_cdi = false" "$w/containerd-nocdi.toml" || { echo "realnode-smoke: could not turn containerd's CDI off" >&2; exit 1; }
  restart_containerd "$w/containerd-nocdi.toml"
  run_pod nocdi "ls /dev/nvidia* 2>&1 | sed s/^/ls:/; cat /etc/tessera/limits | sed s/^/limits:/; sleep 3600" "{tessera.dev/gpu-memory: 1Gi}"
  expect_told nocdi TesseraCdiNotApplied
  expect_log nocdi "ls:ls: /dev/nvidia*: No such file or directory" "saw GPU device nodes although the runtime ignored CDI"
  expect_log nocdi "limits:" "has no limits file (kubelet mounts it whatever the runtime)"
  echo "realnode-smoke: runtime without CDI OK (pod nocdi: $(event_of nocdi TesseraCdiNotApplied | cut -c1-110)...)"
  kubectl delete pod nocdi --grace-period=0 --wait=true >/dev/null
  mkdir -p "$w/cdi-elsewhere"
  sed "s|cdi_spec_dirs = \[\"$w/cdi\"\]|cdi_spec_dirs = [\"$w/cdi-elsewhere\"]|" "$w/containerd.toml" >"$w/containerd-elsewhere.toml"
  grep -q cdi-elsewhere "$w/containerd-elsewhere.toml" || { echo "realnode-smoke: could not point containerd elsewhere" >&2; exit 1; }
  restart_containerd "$w/containerd-elsewhere.toml"
  run_pod unresolved "echo ran" "{tessera.dev/gpu-memory: 1Gi}"
  expect_told unresolved TesseraCdiUnresolved
  ! kubectl logs unresolved 2>/dev/null | grep -qx ran ||
    { echo "realnode-smoke: pod unresolved ran without its CDI device" >&2; exit 1; }
  echo "realnode-smoke: unknown CDI device OK (pod unresolved never started: $(event_of unresolved TesseraCdiUnresolved | cut -c1-110)...)"
  kubectl delete pod unresolved --grace-period=0 --wait=true >/dev/null
  restart_containerd "$w/containerd.toml"
  [[ "$(kubectl get pod share -o jsonpath='{.status.phase}')" == Running ]] ||
    { echo "realnode-smoke: pod share did not survive containerd's restarts" >&2; exit 1; }
  # A drain: the GPU pods are evicted (the DaemonSet's pod stays) and their slots' files go.
  kubectl drain realnode --ignore-daemonsets --force --grace-period=0 --timeout=90s >"$w/drain.log" 2>&1 ||
    { cat "$w/drain.log" >&2; exit 1; }
  gone() { ! kubectl get pod "$1" >/dev/null 2>&1; }
  wait_for 60 "pod share evicted" gone share
  no_slots() { [[ -z "$(ls -A "$w/state/slots" 2>/dev/null)" ]]; }
  wait_for 60 "the slots' files removed after the drain" no_slots ||
    { ls -la "$w/state/slots" >&2; exit 1; }
  kubectl uncordon realnode >/dev/null
  echo "realnode-smoke: drain OK (GPU pods evicted, their slots' files removed)"
  # Uninstall as the chart's README says: node.uninstall, wait for the agents' pods, then
  # helm uninstall. The installed library, the CDI specs, the state folder and the Node's
  # tessera.dev keys are gone.
  "$helm" upgrade tessera "$root/deployments/helm/tessera" --kubeconfig "$KUBECONFIG" \
    --namespace tessera-system --reuse-values --set node.uninstall=true >"$w/helm-upgrade.log" 2>&1 ||
    { cat "$w/helm-upgrade.log" >&2; exit 1; }
  uninstalled() {
    [[ ! -e "$w/lib/libtessera-cuda.so" ]] && ! ls "$w"/cdi/tessera.dev-* >/dev/null 2>&1 &&
      [[ -z "$(kubectl get node realnode -o jsonpath='{.metadata.annotations.tessera\.dev/gpu-inventory}')" ]]
  }
  if ! wait_for 120 "tessera-node --uninstall removing the library, the CDI specs and the Node's keys" uninstalled; then
    kubectl logs -n tessera-system -l app.kubernetes.io/component=node --tail 20 >&2 || true
    ls -la "$w/lib" "$w/cdi" >&2 || true
    exit 1
  fi
  "$helm" uninstall tessera --kubeconfig "$KUBECONFIG" --namespace tessera-system --wait >/dev/null
  echo "realnode-smoke: uninstall OK (library, CDI specs and the Node's inventory removed; helm uninstall done)"
  echo "realnode-smoke: GPU pods OK (train and prep placed by the chart's kube-scheduler + extender, admitted by its webhooks, started with their CDI devices; caps 1 GiB and 2 GiB each held in its own container; the GPU's device node opens only where granted)"
fi
if [[ "${REALNODE_HOLD:-0}" == 1 ]]; then
  echo "realnode-smoke: holding; KUBECONFIG=$KUBECONFIG, containerd at $w/containerd.sock (ctr: $cbin/ctr)" >&2
  trap 'exit 0' TERM INT
  while :; do sleep 1; done
fi
