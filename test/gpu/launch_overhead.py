"""The governed launch path's overhead on launch-bound loops (issue #21: <= 3 % of throughput where
the share does not bind), three ways in rotation, paired by round:
  native     the loop alone, no tessera
  free       under `tessera run` without a share (alone on its GPU: the gate is kFree, one load a
             launch)
  governed   under `tessera run --gpu-cores 90` (fences, probes, the arbiter; the share does not bind)
Loops: `cpp` (test/gpu/launch_loop.cu: runtime launches of a tiny kernel, no host work) and
`torch` (busy_shares.py's launch-bound PyTorch loop).

  launch_overhead.py TESSERA LOOP_BINARY OUT.json   (ROUNDS, SECONDS, LOOPS, CPUS from the environment)

Each round runs the three in a rotated order (a drift over the call cancels); a ratio is taken
within a round, and its median over the rounds gets a bootstrap 95 % interval.

PAIRED=CPUS_A/CPUS_B (e.g. 4-7/8-11): instead, each round runs native and governed (or free, with
PAIRED_WAY=free) at the same time, one on each CPU set, swapping the sets every other round: what
moves a process's rate on a shared host (its clock, its neighbours) then moves both alike. Both
loops are launch-bound (the GPU idles most of the time), so they rarely wait for each other's
kernels. With BASELINE=TESSERA0 (another build's tessera) the pair is that build governed against
this one governed: a change's cost on the launch path beside its baseline's, in the same rounds
("governed/baseline").
"""
import json
import os
import random
import statistics
import subprocess
import sys
import time

from jsonl import json_lines  # beside this script

HERE = os.path.dirname(os.path.abspath(__file__))


def loop_cmd(loop, binary, seconds):
    if loop == "cpp":
        return [binary, "--seconds", str(seconds)]
    return [sys.executable, os.path.join(HERE, "busy_shares.py"), "work", "launchbound",
            "--seconds", str(seconds)]


def rate(loop, lines):
    if loop == "cpp":
        got = [l["launches_per_s"] for l in lines if "launches_per_s" in l]
        return got[0] if got else None
    seconds = [l for l in lines if "units" in l]
    if not seconds:
        return None
    t0 = min(l["t"] for l in seconds)
    kept = [l for l in seconds if l["t"] - t0 >= 2.0]
    if not kept:
        return None
    span = max(l["t"] for l in kept) - min(l["t"] - l["dt"] for l in kept)
    return sum(l["units"] for l in kept) / span


def command(tessera, loop, binary, which, seconds, cpus):
    """The loop run one of the three ways, pinned to `cpus` (none: unpinned)."""
    prefix = ["taskset", "-c", cpus] if cpus else []
    if which == "free":
        prefix += [tessera, "run", "--gpu-memory", "24Gi", "--"]
    elif which == "governed":
        prefix += [tessera, "run", "--gpu-memory", "24Gi", "--gpu-cores", "90", "--"]
    elif which == "baseline":
        prefix += [os.environ["BASELINE"], "run", "--gpu-memory", "24Gi", "--gpu-cores", "90", "--"]
    return prefix + loop_cmd(loop, binary, seconds)


def rate_of(loop, which, returncode, out, err):
    got = rate(loop, list(json_lines(out)))
    if got is None:
        print(f"  {loop} {which}: no rate (rc {returncode}): {err.strip()[-300:]}")
    return got


def run_one(tessera, loop, binary, which, seconds):
    p = subprocess.run(command(tessera, loop, binary, which, seconds, os.environ.get("CPUS")),
                       capture_output=True, text=True, timeout=seconds + 120)
    return rate_of(loop, which, p.returncode, p.stdout, p.stderr)


def run_paired(tessera, loop, binary, seconds, cpus, base="native", way="governed"):
    """`base` (native, or the BASELINE build governed) on cpus[0] and `way` (governed, or free)
    on cpus[1] at once; returns (base, way)."""
    procs = {which: subprocess.Popen(command(tessera, loop, binary, which, seconds, cpu),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for which, cpu in ((base, cpus[0]), (way, cpus[1]))}
    got = {}
    for which, p in procs.items():
        out, err = p.communicate(timeout=seconds + 120)
        got[which] = rate_of(loop, which, p.returncode, out, err)
    return got[base], got[way]


def summarize(loop, table, pairs, rng):
    """Per (numerator, denominator) way: the median ratio within rounds and its interval."""
    summary = {"rounds": table}
    for num, den in pairs:
        ratios = sorted(t[num] / t[den] for t in table if t[num] and t[den])
        if not ratios:
            continue
        lo, hi = interval(ratios, rng)
        summary[f"{num}/{den}"] = {"median": statistics.median(ratios), "ci95": [lo, hi],
                                   "ratios": ratios}
        print(f"{loop} {num}/{den}: median {statistics.median(ratios):.4f} "
              f"(95 % interval {lo:.4f} .. {hi:.4f}, {len(ratios)} rounds)", flush=True)
    return summary


def paired_rounds(tessera, binary, out, results, rounds, seconds, sets, rng):
    results["paired"] = "/".join(sets)
    base = "baseline" if os.environ.get("BASELINE") else "native"
    way = os.environ.get("PAIRED_WAY", "governed")
    results["baseline"] = os.environ.get("BASELINE")
    results["way"] = way
    for loop in os.environ.get("LOOPS", "cpp torch").split():
        table = []
        for r in range(rounds):
            cpus = sets if r % 2 == 0 else sets[::-1]
            other, mine = run_paired(tessera, loop, binary, seconds, cpus, base, way)
            table.append({base: other, way: mine, "cpus": cpus})
            print(f"{loop} paired round {r} ({base} on {cpus[0]}): {base} {other}/s "
                  f"{way} {mine}/s", flush=True)
        results["loops"][loop] = summarize(loop, table, [(way, base)], rng)
        with open(out, "w") as f:
            json.dump(results, f, indent=1)


def interval(ratios, rng):
    boot = sorted(statistics.median(rng.choice(ratios) for _ in ratios) for _ in range(2000))
    return boot[50], boot[1949]


def main():
    tessera, binary, out = sys.argv[1:4]
    rounds = int(os.environ.get("ROUNDS", "6"))
    seconds = int(os.environ.get("SECONDS", "4"))
    ways = ("native", "free", "governed")
    results = {"date": time.strftime("%Y-%m-%d %H:%M"), "rounds": rounds, "seconds": seconds,
               "cpus": os.environ.get("CPUS"), "loops": {}}
    rng = random.Random(21)
    if os.environ.get("PAIRED"):
        paired_rounds(tessera, binary, out, results, rounds, seconds,
                      os.environ["PAIRED"].split("/"), rng)
        return
    for loop in os.environ.get("LOOPS", "cpp torch").split():
        table = []
        for r in range(rounds):
            order = ways[r % 3:] + ways[:r % 3]
            got = {w: run_one(tessera, loop, binary, w, seconds) for w in order}
            table.append(got)
            print(f"{loop} round {r}: " + "  ".join(
                f"{w} {got[w]:.1f}/s" if got[w] else f"{w} -" for w in ways), flush=True)
        results["loops"][loop] = summarize(
            loop, table, [("free", "native"), ("governed", "native"), ("governed", "free")], rng)
        with open(out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
