#!/usr/bin/env python3
"""The scale curve of one placement decision (issue #26; docs/benchmarks.md, ADR 0010).

Runs bench/placement_bench once per (binary, policy, scale) in its own process, so that
peak_rss_mib (VmHWM) is that configuration's, ROUNDS times with the configurations interleaved
(the order rotates every round, and is reversed every other round), and prints per
configuration the median over rounds of p50, p99 and peak RSS, and the median of tessera's p99
over FGD's p99 of the same round (and binary). With two build folders (OLD,NEW) both binaries
run in every round, and the table adds the median of NEW's p99 over OLD's in the same round.

usage: bench/scale_curve.py BUILD_DIR[,BUILD_DIR2] [ROUNDS] [SCALES] [RAW.json]
  e.g. bench/scale_curve.py build/placement 8 1,3,5,10   (about 7 minutes on 2 cores)
       bench/scale_curve.py /tmp/old,build/dev 8 1,10    (old and new binary, interleaved)
"""
import json
import statistics
import subprocess
import sys

POLICIES = {"fgd": 5, "tessera": 6}


def run(bench, policy, scale):
    out = subprocess.run(
        [bench, f"--benchmark_filter=BM_PlacementDecision/policy:{POLICIES[policy]}/scale:{scale}/",
         "--benchmark_format=json"], check=True, capture_output=True, text=True).stdout
    b = json.loads(out)["benchmarks"][0]
    return {k: b[k] for k in ("nodes", "decisions", "p50_us", "p99_us", "max_us", "peak_rss_mib",
                              "classes_mean", "classes_max")}


def main():
    builds = sys.argv[1].split(",")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    scales = [int(s) for s in (sys.argv[3] if len(sys.argv) > 3 else "1,3,5,10").split(",")]
    configs = [(b, p, s) for s in scales for b in builds for p in POLICIES]
    results = {c: [] for c in configs}
    for r in range(rounds):
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        if r % 2 == 1:
            order.reverse()
        for c in order:
            results[c].append(run(f"{c[0]}/bench/placement_bench", c[1], c[2]))
            print(f"round {r} {c[0]} {c[1]} x{c[2]}: p99 {results[c][-1]['p99_us']:.0f} us",
                  file=sys.stderr, flush=True)
    two = len(builds) == 2
    print(("| nodes | binary | policy |" if len(builds) > 1 else "| nodes | policy |") +
          " p50 µs | p99 µs (min–max) | tessera p99 / FGD p99 |" +
          (" p99 new / old |" if two else "") + " peak RSS MiB | classes mean / max |")
    print("|---" * (9 if two else 8 if len(builds) > 1 else 7) + "|")
    for s in scales:
        for b in builds:
            for p in POLICIES:
                rs = results[(b, p, s)]
                med = lambda k: statistics.median(x[k] for x in rs)
                p99s = [x["p99_us"] for x in rs]
                ratio = ""
                if p == "tessera":
                    ratio = "%.2f" % statistics.median(
                        t["p99_us"] / f["p99_us"] for t, f in zip(rs, results[(b, "fgd", s)]))
                vs_old = ""
                if two and b == builds[1]:
                    vs_old = "%.2f" % statistics.median(
                        n["p99_us"] / o["p99_us"] for n, o in zip(rs, results[(builds[0], p, s)]))
                print(f"| {int(rs[0]['nodes']):,} |" + (f" {b} |" if len(builds) > 1 else "") +
                      f" {p} | {med('p50_us'):.1f} | {med('p99_us'):.0f} "
                      f"({min(p99s):.0f}–{max(p99s):.0f}) | {ratio} |" +
                      (f" {vs_old} |" if two else "") + f" {med('peak_rss_mib'):.0f} | "
                      f"{med('classes_mean'):.0f} / {med('classes_max'):.0f} |")
    if len(sys.argv) > 4:
        with open(sys.argv[4], "w") as raw:
            json.dump({(f"{b}/" if len(builds) > 1 else "") + f"{p}/{s}": v
                       for (b, p, s), v in results.items()}, raw)


if __name__ == "__main__":
    main()
