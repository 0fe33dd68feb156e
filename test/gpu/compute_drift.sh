#!/usr/bin/env bash
# Issue #22 on a GPU host, without Kubernetes: compute drift (`tessera drift --watch-compute`,
# the check tessera-node runs) against
#   tamper   a tenant under a 30 % hard share that rewrites its region's gate from second 15
#            (test/gpu/gate_tamper.cc): flagged over-hard-share within 10 s of it
#   bypass   beside an honest process of the same container, a process without the preload
#            library in the container's cgroup (pod uid "local": a cgroup named podlocal-*) from
#            second 15: flagged ungoverned-process within 10 s
#   honest   RUNS runs of SECONDS: a 30 % hard share and a work-conserving 30 % tenant borrowing
#            the idle rest, both GEMM loops at once: no flag
# Usage: test/gpu/compute_drift.sh OUT   (BUILD=build/gpu, RUNS=1, SECONDS_PER_RUN=120,
#        SCENARIOS="tamper bypass honest", FIRST_RUN=1: the honest runs' numbering, so that runs
#        split over several calls keep distinct names)
# Prints a table; writes OUT/compute_drift.jsonl (every episode), OUT/*.drift.out (the whole
# drift report) and OUT/*.err (tessera run).
set -o pipefail
OUT=${1:?usage: compute_drift.sh OUT}
B=${BUILD:-build/gpu}
T=$B/cmd/tessera/tessera
RUNS=${RUNS:-1}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-120}
SCENARIOS=${SCENARIOS:-tamper bypass honest}
FIRST_RUN=${FIRST_RUN:-1}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
g++ -std=c++20 -O2 -I"$HERE/../../include" "$HERE/gate_tamper.cc" -o /tmp/gate_tamper || exit 1
GEMM="python3 $HERE/busy_shares.py work gemm --seconds"

# start NAME TESSERA_RUN_ARGS... : a container in the background; sets DIR (its folder).
start() {
  local name=$1
  shift
  "$T" run --keep --gpu-memory 24Gi "$@" 2>"$OUT/$name.err" >/dev/null &
  for _ in $(seq 100); do
    DIR=$(sed -n 's/^tessera run: folder \(.*\) (kept)$/\1/p' "$OUT/$name.err")
    [ -n "$DIR" ] && return 0
    sleep 0.1
  done
  echo "$name: no folder" >&2
  return 1
}

# watch NAME SECONDS DIR...: the episodes as JSON lines, tagged with the scenario.
watch() {
  local name=$1 seconds=$2
  shift 2
  "$T" drift --json --watch-compute "$seconds" "$@" 2>>"$OUT/$name.drift.err" |
    tee "$OUT/$name.drift.out" | grep '"kind"' | sed "s/^{/{\"scenario\": \"$name\", /" |
    tee -a "$OUT/compute_drift.jsonl"
}

first_second() {  # scenario kind -> the second of its first episode, or "none"
  python3 - "$OUT/compute_drift.jsonl" "$1" "$2" <<'PY'
import json, sys
path, scenario, kind = sys.argv[1:4]
got = [json.loads(l) for l in open(path) if l.strip()]
hits = [g["second"] for g in got if g.get("scenario") == scenario and g["kind"] == kind]
print(min(hits) if hits else "none")
PY
}

: >"$OUT/compute_drift.jsonl"
wanted() { case " $SCENARIOS " in *" $1 "*) return 0 ;; esac; return 1; }

# tamper: honest for 15 s, then the gate is rewritten.
if wanted tamper; then
start tamper --gpu-cores 30 -- sh -c "($GEMM 45 >/dev/null &) ; sleep 15; /tmp/gate_tamper 30"
watch tamper 45 "$DIR" >/dev/null
wait
fi
# bypass: an honest process under the library, and from second 15 one without it in the pod's cgroup.
if wanted bypass; then
CG=/sys/fs/cgroup/podlocal-bypass
mkdir -p "$CG" 2>/dev/null || echo "bypass: cannot create $CG (no cgroup v2 write access)" >&2
start bypass --gpu-cores 30 -- sh -c "($GEMM 45 >/dev/null &) ; sleep 15; if echo \$\$ > $CG/cgroup.procs; then exec env -u LD_PRELOAD $GEMM 30 >/dev/null; else echo 'bypass: cannot join $CG' >&2; fi"
watch bypass 45 "$DIR" >/dev/null
wait
rmdir "$CG" 2>/dev/null
fi
# honest: a hard share and a work-conserving tenant borrowing, RUNS times.
wanted honest || RUNS=0
for r in $(seq "$FIRST_RUN" $((FIRST_RUN + RUNS - 1))); do
  start "honest-hard-$r" --gpu-cores 30 -- $GEMM "$SECONDS_PER_RUN"
  HARD=$DIR
  start "honest-wc-$r" --gpu-cores 30 --compute work-conserving -- $GEMM "$SECONDS_PER_RUN"
  watch "honest-$r" "$SECONDS_PER_RUN" "$HARD" "$DIR" >/dev/null
  wait
done
echo "scenario | expected | first episode (s) | episodes"
echo "tamper (gate rewritten at 15 s) | over-hard-share by 25 s | $(first_second tamper over-hard-share) | $(grep -c '"scenario": "tamper"' "$OUT/compute_drift.jsonl")"
echo "bypass (no library from 15 s) | ungoverned-process by 25 s | $(first_second bypass ungoverned-process) | $(grep -c '"scenario": "bypass"' "$OUT/compute_drift.jsonl")"
echo "honest ($RUNS x $SECONDS_PER_RUN s) | none | - | $(grep -c '"scenario": "honest' "$OUT/compute_drift.jsonl")"
