#!/usr/bin/env bash
# The MPS backend with two user IDs (issue #5): the MPS control daemon serves one UID at a time,
# so tessera refuses a `--mode mps` client of a second user while the first user's client runs,
# and accepts it once that one has left. Runs as root on the GPU host; the second user is
# `nobody` (setpriv). Also prints the daemon's logs (the client environment tessera gave it:
# pinned memory limit, thread percentage, priority). Args: the tessera build folder.
set -uo pipefail
build=$1
bin=$(mktemp -d /tmp/tessera-bin-XXXXXX)
cp "$build/cmd/tessera/tessera" "$build/src/hook/libtessera-cuda.so" "$bin/"
chmod 755 "$bin" "$bin"/*
arbiter=$(mktemp -d /tmp/tessera-arbiter-XXXXXX)
chmod 1777 "$arbiter"
client='import time, torch; x = torch.ones(1 << 20, device="cuda"); torch.cuda.synchronize(); time.sleep(float(__import__("sys").argv[1])); print("client ran:", float(x.sum()))'
run() { "$bin/tessera" run --mode mps --gpu-memory 2Gi --gpu-cores 50 --priority best-effort --arbiter-dir "$arbiter" -- python3 -c "$client" "$@"; }
run 8 >/tmp/mps-root.out 2>&1 &
root=$!
sleep 4
echo "== a second user while root's client runs (expect a refusal):"
setpriv --reuid=65534 --regid=65534 --clear-groups "$bin/tessera" run --mode mps --arbiter-dir "$arbiter" -- \
  python3 -c "$client" 0; echo "exit $?"
wait "$root"; echo "== root's client: exit $?"; cat /tmp/mps-root.out
echo "== the second user once root's client has left (expect it to run):"
HOME=/tmp setpriv --reuid=65534 --regid=65534 --clear-groups "$bin/tessera" run --mode mps --arbiter-dir "$arbiter" -- \
  python3 -c "$client" 0; echo "exit $?"
echo "== MPS logs (root's daemon):"
tail -n 4 "$arbiter"/*/mps/uid-0/log/control.log "$arbiter"/*/mps/uid-0/log/server.log 2>/dev/null
rm -rf "$bin" "$arbiter"
