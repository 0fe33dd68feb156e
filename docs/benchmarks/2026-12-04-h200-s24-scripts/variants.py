"""Interleaved rounds of one stamped shape: native and each variant's `tessera run --gpu-cores S`
in a rotated order; each variant's rate over the mean native rate of its round.
  variants.py STAMPED_WORK SHAPE SHARE ROUNDS SECONDS NAME=TESSERA ...  (prints a table)"""
import json, os, re, statistics, subprocess, sys
binary, shape, share, rounds, seconds = sys.argv[1:6]
variants = [("native", None)] + [tuple(a.split("=", 1)) for a in sys.argv[6:]]
shape, _, host = shape.partition(":")
rates = {n: [] for n, _ in variants}
ratios = {n: [] for n, _ in variants}
for r in range(int(rounds)):
    order = variants[r % len(variants):] + variants[:r % len(variants)]
    got = {}
    for name, t in order:
        cmd = [binary, shape, "--seconds", seconds] + (["--host-us", host] if host else [])
        if t:
            cmd = [t, "run", "--gpu-memory", "24Gi", "--gpu-cores", share, "--"] + cmd
        p = subprocess.run(["taskset", "-c", "4-11"] + cmd, capture_output=True, text=True, timeout=60)
        line = next((json.loads(l) for l in p.stdout.splitlines() if "units_per_s" in l), None)
        thr = re.search(r"throttled (\d+) ms", p.stderr)
        got[name] = line["units_per_s"] if line else None
        print(f"round {r} {name}: {got[name]} throttled {thr.group(1) if thr else '-'}", flush=True)
    for name, _ in variants:
        if got[name] and got["native"]:
            rates[name].append(got[name]); ratios[name].append(got[name] / got["native"])
print(f"{shape}{':' + host if host else ''} at {share} %: median ratio to native (min-max)")
for name, _ in variants:
    rs = sorted(ratios[name])
    if rs:
        print(f"  {name:8} {statistics.median(rs):.3f} ({rs[0]:.3f}-{rs[-1]:.3f}) rates {[round(x) for x in rates[name]]}")
