"""The governed launch path's cost in sequence (issue #21: <= 3 % of a launch-bound loop where the
share does not bind): one stamped_work shape natively and under each build's `tessera run
--gpu-cores SHARE`, one run after another in a rotated order each round; a build's ratio is its
rate over the same round's native rate, the median over the rounds (min-max).

  launch_variants.py STAMPED_WORK SHAPE[:HOST_US] SHARE ROUNDS SECONDS NAME=TESSERA ...

Not paired (both at once on two CPU sets): two launch-bound loops on one GPU make each other
GPU-bound and hide the path's CPU cost (session 24, docs/benchmarks.md). CPUS (default 4-11):
the cores every run is pinned to. Prints each run and a table.
"""
import json
import os
import re
import statistics
import subprocess
import sys


def main():
    binary, shape, share, rounds, seconds = sys.argv[1:6]
    variants = [("native", None)] + [tuple(a.split("=", 1)) for a in sys.argv[6:]]
    shape, _, host = shape.partition(":")
    cpus = os.environ.get("CPUS", "4-11")
    ratios = {n: [] for n, _ in variants}
    for r in range(int(rounds)):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        got = {}
        for name, tessera in order:
            cmd = [binary, shape, "--seconds", seconds] + (["--host-us", host] if host else [])
            if tessera:
                cmd = [tessera, "run", "--gpu-memory", "24Gi", "--gpu-cores", share, "--"] + cmd
            p = subprocess.run(["taskset", "-c", cpus] + cmd, capture_output=True, text=True,
                               timeout=float(seconds) + 60)
            line = next((json.loads(l) for l in p.stdout.splitlines() if "units_per_s" in l), None)
            throttled = re.search(r"throttled (\d+) ms", p.stderr)
            got[name] = line["units_per_s"] if line else None
            print(f"round {r} {name}: {got[name]} throttled "
                  f"{throttled.group(1) if throttled else '-'}", flush=True)
        for name, _ in variants:
            if got[name] and got["native"]:
                ratios[name].append(got[name] / got["native"])
    print(f"{shape}{':' + host if host else ''} at {share} %: median ratio to native (min-max)")
    for name, _ in variants:
        rs = sorted(ratios[name])
        if rs:
            print(f"  {name:8} {statistics.median(rs):.3f} ({rs[0]:.3f}-{rs[-1]:.3f})")


if __name__ == "__main__":
    main()
