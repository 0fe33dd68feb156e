#!/usr/bin/env bash
# How tessera-node runs one MPS daemon per GPU for containers (ADR 0017): the daemon in its own
# mount namespace with a private folder as /dev/shm, and clients — as containers would be — in
# other mount namespaces given the daemon's pipe folder and the same shm folder. Checks that a
# client so placed runs under the daemon, whether a client *without* the shm folder (the host's
# /dev/shm) can, and whether one in its own IPC and PID namespaces too (as a container is) can.
# Runs as root on the GPU host; needs unshare(1) and mount(8).
set -uo pipefail
d=$(mktemp -d /tmp/tessera-mps-ns-XXXXXX)
mkdir -p "$d/pipe" "$d/log" "$d/shm"
client='import torch; x = torch.ones(1 << 20, device="cuda"); torch.cuda.synchronize(); print("sum", float(x.sum()))'
in_ns() {  # in_ns SHM_FOLDER|- CMD...: run CMD in a new mount namespace, SHM_FOLDER as /dev/shm
  local shm=$1; shift
  unshare -m ${EXTRA_NS:-} sh -c 'mount --make-rprivate / && { [ "$0" = - ] || mount --bind "$0" /dev/shm; } && exec "$@"' "$shm" "$@"
}
export CUDA_MPS_PIPE_DIRECTORY=$d/pipe CUDA_MPS_LOG_DIRECTORY=$d/log
in_ns "$d/shm" nvidia-cuda-mps-control -d; echo "daemon start: exit $?"
sleep 1
echo "== client with the daemon's shm folder:"; in_ns "$d/shm" timeout 60 python3 -c "$client"; echo "exit $?"
echo "== client with the host's /dev/shm:"; in_ns - timeout 60 python3 -c "$client"; echo "exit $?"
for ns in "-i" "-p -f" "-i -p -f"; do
  echo "== client in its own mount namespace and unshare $ns (a container's IPC / PID namespaces):"
  EXTRA_NS=$ns in_ns - timeout 60 python3 -c "$client" 2>&1 | tail -n 1; echo "exit ${PIPESTATUS[0]}"
done
echo "== shm folder:"; ls "$d/shm" | head -5
echo "== server log:"; grep -E "connected|associated|exit|rror" "$d/log/server.log" | head -8
echo quit | nvidia-cuda-mps-control; sleep 1
rm -rf "$d"
