#!/usr/bin/env bash
# Why a GEMM loop capped at a share of GPU time completes more than that share of its solo work:
# samples the SM clock and power (nvidia-smi, every 200 ms) while compute_workload's gemm runs
# alone and under `tessera run --gpu-cores 30`, and prints the medians. Args: the tessera build
# folder and the compute_workload binary (compute_shares.sh builds both).
set -euo pipefail
build=$1 workload=$2
sample() {  # sample LABEL CMD...: median SM clock (MHz) and power (W) while CMD runs
  local label=$1; shift
  nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 200 >"/tmp/clocks-$label" &
  local smi=$!
  "$@" >/dev/null 2>&1 || true
  kill "$smi"; wait "$smi" 2>/dev/null || true
  python3 - "$label" "/tmp/clocks-$label" <<'PY'
import statistics, sys
rows = [l.split(",") for l in open(sys.argv[2]) if l.strip()][5:]  # skip the warm-up second
clock = statistics.median(float(r[0]) for r in rows)
power = statistics.median(float(r[1]) for r in rows)
print(f"{sys.argv[1]:24} SM clock {clock:6.0f} MHz  power {power:5.0f} W  ({len(rows)} samples)")
PY
}
sample "gemm solo" "$workload" gemm --seconds 6
sample "gemm, 30 % hard share" "$build/cmd/tessera/tessera" run --gpu-cores 30 -- "$workload" gemm --seconds 6
