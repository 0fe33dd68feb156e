#!/usr/bin/env bash
# tessera-node's NVML inventory on a real GPU host, checked against nvidia-smi.
# Builds `tessera` with the dependency-free gpu preset and prints/compares:
#   tessera inventory --gpus all    (what tessera-node publishes as tessera.dev/gpu-inventory)
#   nvidia-smi --query-gpu=...      (the driver's own view)
# Output folder: $1 (default build/gpu-out); writes inventory.json and nvidia-smi.csv there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out=${1:-build/gpu-out}
mkdir -p "$out"
cmake --preset gpu >/dev/null
cmake --build build/gpu -j "$(nproc)" --target tessera 2>&1 | tail -n 1
build/gpu/cmd/tessera/tessera inventory --gpus all --node-name "$(hostname)" >"$out/inventory.json"
nvidia-smi --query-gpu=uuid,name,memory.total,index,pci.bus_id --format=csv,noheader,nounits \
  >"$out/nvidia-smi.csv"
nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1 >"$out/driver.txt"
python3 - "$out" <<'PY'
import csv, json, sys
out = sys.argv[1]
inv = json.load(open(f"{out}/inventory.json"))
smi = {row[0].strip(): row for row in csv.reader(open(f"{out}/nvidia-smi.csv"))}
ok = True
print(f"driver {open(out + '/driver.txt').read().strip()}; {len(inv['gpus'])} GPU(s) in the inventory, {len(smi)} in nvidia-smi")
for g in inv["gpus"]:
    row = smi.get(g["uuid"])
    same = row is not None and row[1].strip() == g["model"] and int(row[3]) == g["index"]
    # nvidia-smi's memory.total is MiB and excludes nothing; NVML's total is bytes
    mem_ok = row is not None and abs(int(row[2]) * 1024 * 1024 - g["memoryBytes"]) <= 1024 * 1024
    ok &= same and mem_ok and g["smCount"] > 0 and g["health"] == "healthy"
    print(f"  {g['index']} {g['uuid']} {g['model']} {g['memoryBytes']} B sm={g['smCount']} "
          f"numa={g['numaNode']} mig={g['mig']['mode']} {g['health']} "
          f"-> {'matches nvidia-smi' if same and mem_ok else 'MISMATCH'}")
print("inventory check:", "PASS" if ok and len(inv["gpus"]) == len(smi) else "FAIL")
sys.exit(0 if ok and len(inv["gpus"]) == len(smi) else 1)
PY
