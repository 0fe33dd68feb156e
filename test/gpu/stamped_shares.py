"""Delivered rate under compute shares against min(1, s / b), b from the kernels' own stamps
(issue #21), with stamped_work (a C++ workload: starts in a fraction of a second, steady rates).

  stamped_shares.py TESSERA STAMPED_WORK OUT.json

Environment: SHAPES (default "launchbound graphs streams procs2"), SHARES (default "10 30 50 90"),
ROUNDS (default 2), SECONDS (default 4), CPUS (taskset list; default unpinned), TRACE=1 (b from a
CUPTI trace too: stamped_work built with CUPTI).
procsN runs N launch-bound processes of one container (under one `tessera run`); b is then the
union of all their kernels' intervals. SHAPE:H gives the workload H us of host work (--host-us).

Each round runs the shape natively (its b: the union of its kernels' intervals over the window,
from the stamps), then under each share in a rotated order, each followed by a native run again;
the ratio is the governed rate over the mean of the native runs on either side, and its error the
ratio less min(1, s / b), in percentage points. With TRACE=1 each round also runs the shape
natively under CUPTI's activity trace, whose kernel records span each kernel's dispatch and
completion too (a clock read inside the kernel sees neither): b by CUPTI is the native b times
what CUPTI's records span over what the stamps span in that traced run.
Prints a table; OUT.json holds every run.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

from jsonl import json_lines  # beside this script


def union_ns(files):
    """The union of several processes' intervals over the window they all ran in."""
    arrays = [np.fromfile(f, dtype=np.uint64).reshape(-1, 2) for f in files]
    arrays = [a for a in arrays if len(a)]
    if not arrays:
        return 0.0, 0.0
    lo = max(int(a[:, 0].min()) for a in arrays)
    hi = min(int(a[:, 1].max()) for a in arrays)
    iv = np.concatenate(arrays)
    iv = iv[(iv[:, 0] >= lo) & (iv[:, 1] <= hi)]
    if hi <= lo or len(iv) == 0:  # the processes' windows do not overlap
        return 0.0, 0.0
    iv = iv[np.argsort(iv[:, 0], kind="stable")]
    starts = iv[:, 0].astype(np.int64)
    ends = np.maximum.accumulate(iv[:, 1].astype(np.int64))
    # A new run of busy time begins where a start lies past every earlier end.
    new = np.ones(len(iv), dtype=bool)
    new[1:] = starts[1:] > ends[:-1]
    run_starts = starts[new]
    run_ends = np.append(ends[np.flatnonzero(new)[1:] - 1], ends[-1])
    return float((run_ends - run_starts).sum()), float(hi - lo)


def command(shape, binary, seconds, stamps, trace=False):
    shape, _, host_us = shape.partition(":")
    procs = int(shape[5:]) if shape.startswith("procs") else 1
    one = "launchbound" if procs > 1 else shape
    runs = []
    for i in range(procs):
        cmd = [binary, one, "--seconds", str(seconds)]
        if host_us:
            cmd += ["--host-us", host_us]
        if trace:
            cmd += ["--trace", "cupti"]
        if stamps is not None:
            cmd += ["--stamps", f"{stamps}.{i}"]
        runs.append(cmd)
    if procs == 1:
        return runs[0], procs
    script = " & ".join(" ".join(c) for c in runs) + " & wait"
    return ["sh", "-c", script], procs


def run(tessera, shape, binary, seconds, share, tmp, trace=False):
    stamps = os.path.join(tmp, "stamps") if share is None else None
    cmd, procs = command(shape, binary, seconds, stamps, trace)
    if share is not None:
        cmd = [tessera, "run", "--gpu-memory", "24Gi", "--gpu-cores", str(share), "--"] + cmd
    if os.environ.get("CPUS"):
        cmd = ["taskset", "-c", os.environ["CPUS"]] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    lines = [l for l in json_lines(p.stdout) if "units_per_s" in l]
    if len(lines) != procs:
        print(f"  {shape} share {share}: {len(lines)} of {procs} results (rc {p.returncode}): "
              f"{p.stderr.strip()[-300:]}", flush=True)
        return None
    got = {"rate": sum(l["units_per_s"] for l in lines), "runs": lines}
    # tessera run's closing line: whether the share bound (throttled) and what it charged.
    for key, pattern in (("busy_ms", r"GPU busy (\d+) ms"), ("throttled_ms", r"throttled (\d+) ms")):
        found = re.search(pattern, p.stderr)
        if found:
            got[key] = int(found.group(1))
    if share is None:
        if procs == 1:
            got["b"] = lines[0]["b"]
        else:
            busy, window = union_ns([f"{stamps}.{i}" for i in range(procs)])
            got["b"] = busy / window if window > 0 else None
            got["summed_b"] = sum(l["b"] for l in lines)
    return got


def cupti_over_stamps(traced):
    """What CUPTI's records span over what the kernels' stamps do, in one traced run (tracing
    slows the launches, so its b is not the untraced run's; the ratio of the two witnesses is)."""
    stamped = sum(l.get("b_stamps", 0) for l in traced["runs"])
    return sum(l["b"] for l in traced["runs"]) / stamped if stamped > 0 else None


def one_round(tessera, shape, binary, seconds, shares, r, tmp):
    """Native, then each share (rotated by round) followed by native again: each governed run is
    taken against the mean of the native runs on either side of it (rate and b), so that a host
    whose speed drifts between runs moves both alike."""
    ratio_cupti = None
    if os.environ.get("TRACE") == "1":
        traced = run(tessera, shape, binary, seconds, None, tmp, trace=True)
        if traced is not None:
            ratio_cupti = cupti_over_stamps(traced)
    order = shares[r % len(shares):] + shares[:r % len(shares)]
    natives = [run(tessera, shape, binary, seconds, None, tmp)]
    rows = []
    for share in order:
        got = run(tessera, shape, binary, seconds, share, tmp)
        natives.append(run(tessera, shape, binary, seconds, None, tmp))
        around = [n for n in natives[-2:] if n is not None and n.get("b")]
        if got is None or not around:
            continue
        rate = sum(n["rate"] for n in around) / len(around)
        b = sum(n["b"] for n in around) / len(around)
        expected = min(1.0, share / 100 / b)
        ratio = got["rate"] / rate
        row = {"round": r, "share": share, "b": b, "natives": around, "native_rate": rate,
               "governed": got, "ratio": ratio, "expected": expected,
               "error_pp": 100 * (ratio - expected)}
        by_cupti = ""
        if ratio_cupti:
            row["b_cupti"] = b * ratio_cupti
            row["expected_cupti"] = min(1.0, share / 100 / row["b_cupti"])
            row["error_cupti_pp"] = 100 * (ratio - row["expected_cupti"])
            by_cupti = (f"; by CUPTI b {row['b_cupti']:.3f} expected "
                        f"{row['expected_cupti']:.3f} ({row['error_cupti_pp']:+.1f} pp)")
        rows.append(row)
        print(f"{shape} round {r} share {share}: b {b:.3f} native {rate:.1f}/s governed "
              f"{got['rate']:.1f}/s ratio {ratio:.3f} expected {expected:.3f} "
              f"({100 * (ratio - expected):+.1f} pp){by_cupti}; throttled "
              f"{got.get('throttled_ms', '?')} ms of {seconds:.0f} s", flush=True)
    return rows


def main():
    tessera, binary, out = sys.argv[1:4]
    shapes = os.environ.get("SHAPES", "launchbound graphs streams procs2").split()
    shares = [int(s) for s in os.environ.get("SHARES", "10 30 50 90").split()]
    rounds = int(os.environ.get("ROUNDS", "2"))
    seconds = float(os.environ.get("SECONDS", "4"))
    results = {"date": time.strftime("%Y-%m-%d %H:%M"), "seconds": seconds, "cpus":
               os.environ.get("CPUS"), "shapes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for shape in shapes:
            rows = []
            for r in range(rounds):
                rows += one_round(tessera, shape, binary, seconds, shares, r, tmp)
            results["shapes"][shape] = rows
            with open(out, "w") as f:
                json.dump(results, f, indent=1)
    print("\nshape          share  b (stamps / CUPTI)  delivered / expected (error pp: stamps, CUPTI)")
    for shape, rows in results["shapes"].items():
        for share in shares:
            mine = [r for r in rows if r["share"] == share]
            cells = "  ".join(
                f"{r['ratio']:.3f}/{r['expected']:.3f} ({r['error_pp']:+.1f}"
                + (f", {r['error_cupti_pp']:+.1f})" if "b_cupti" in r else ")") for r in mine)
            bs = ",".join(f"{r['b']:.3f}/{r.get('b_cupti') or 0:.3f}" for r in mine)
            print(f"{shape:<14} {share:>4}%  {bs:<20} {cells}")


if __name__ == "__main__":
    main()
