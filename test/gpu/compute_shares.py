"""Compute shares under `tessera run`, measured by the workload itself (compute_workload.cu counts
the work it sees complete against the host clock). Run by compute_shares.sh on the GPU host;
prints a table per part and writes compute_shares.json.

(a) accuracy: per kind (gemm, tiny, long, graph) a solo rate without tessera, then one container
    at --gpu-cores 10..90; the delivered share of each 3 s window is its rate / the solo rate.
    Also gemm alone at 30 % work-conserving (idle capacity is lent: expect ~100 %).
(b) splits: two containers at once, each share = its rate / the solo rate; and reclaim: A (30 %,
    work-conserving) alone, then B (70 %, work-conserving) starts beside it.
(d) overhead with no compute cap (memory cap only): the host's enqueue cost of an empty kernel
    (`compute_workload enqueue`: batches of 32 launches, only the enqueue timed, synchronized
    between batches, median over batches), through the runtime and through the driver;
    interleaved A/B processes against native, median of paired differences with a bootstrap 95 %
    CI, the workload pinned to one CPU; then the hooked driver calls per launch
    (TESSERA_HOOK_STATS runs).
PARTS (default "a b d") picks parts; REPEATS (default 30) sets (d)'s pairs; COMPUTE_WINDOW=MS
gives (a)'s hard shares `--compute-window MS`.
"""
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time

from jsonl import json_lines  # beside this script

BUILD, OUT = sys.argv[1], sys.argv[2]
TESSERA = os.path.join(BUILD, "cmd/tessera/tessera")
WORKLOAD = os.path.join(OUT, "compute_workload")
PARTS = os.environ.get("PARTS", "a b d").split()
REPEATS = int(os.environ.get("REPEATS", "30"))
CPUS = sorted(os.sched_getaffinity(0))
PIN = {int(os.environ.get("PIN_CPU", CPUS[min(3, len(CPUS) - 1)]))}  # one core: less noise
# (d) pins the workload process only (PIN_SCOPE=child, default): `tessera run` itself, whose
# thread hosts the machine's arbiter, runs where the OS puts it, as tessera-node's arbiter does
# beside a container. PIN_SCOPE=all pins `tessera run` too (its threads then share the core).
PIN_SCOPE = os.environ.get("PIN_SCOPE", "child")
PINNED = [sys.executable, "-c",
          "import os,sys; os.sched_setaffinity(0, {%s}); os.execv(sys.argv[1], sys.argv[1:])"
          % ",".join(map(str, PIN))]
KINDS = tuple(os.environ.get("KINDS", "gemm tiny long graph").split())
# (a): COMPUTE_WINDOW=MS runs the hard shares with `--compute-window MS` (cycles of MS).
COMPUTE_WINDOW = os.environ.get("COMPUTE_WINDOW", "")
sys.stdout.reconfigure(line_buffering=True)
results = {"date": time.strftime("%Y-%m-%d %H:%M"), "compute_window_ms": COMPUTE_WINDOW or None,
           "solo": {}, "accuracy": [], "splits": [],
           "overhead": None}


def tessera(*flags):
    return [TESSERA, "run", *flags, "--"]


def start(kind, seconds, prefix=(), window=3):
    cmd = [*prefix, WORKLOAD, kind, "--seconds", str(seconds), "--window", str(window)]
    if prefix and kind != "gemm":  # a throttled unit is the same work as a solo unit
        cmd += ["--calibration", solo(kind)["calibration"]]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def finish(proc, timeout):
    """The workload's windows and total, or {"error": ...}."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # tessera run and the workload under it
        out, err = proc.communicate()
    lines = list(json_lines(out))
    total = [l for l in lines if "total_units" in l]
    if proc.returncode != 0 or not total:
        return {"error": f"exit {proc.returncode}: {err.strip()[-400:]}"}
    return {"windows": [l for l in lines if "window" in l], "total": total[0],
            "tessera": [l for l in err.splitlines() if l.startswith("tessera run")]}


def run(kind, seconds, prefix=(), window=3):
    return finish(start(kind, seconds, prefix, window), seconds + 90)


def solo(kind):
    """Native rate over 9 s, measured once; the spin kinds' calibration is reused by every run."""
    if kind not in results["solo"]:
        res = run(kind, 9)
        if "error" not in res:
            t = res["total"]
            res["rate"] = t["rate"]
            res["calibration"] = f"{t.get('ns_per_iter')},{t.get('fixed_ns')}"
        results["solo"][kind] = res
    if "error" in results["solo"][kind]:
        raise RuntimeError(f"solo {kind}: {results['solo'][kind]['error']}")
    return results["solo"][kind]


def share(rate, kind):
    return 100.0 * rate / solo(kind)["rate"]


def window_shares(res, kind):
    """Mean, min and max delivered share over the windows, in % of solo."""
    if "error" in res:
        return res
    s = [share(w["rate"], kind) for w in res["windows"]]
    if not s:
        return {"error": "no windows"}
    return {"mean": statistics.fmean(s), "min": min(s), "max": max(s), "windows": s,
            "tessera": res["tessera"]}


def fmt(x, spec=".1f"):
    return "error" if x is None else format(x, spec)


def accuracy():
    print("\n(a) accuracy: delivered share per 3 s window, % of the solo rate")
    print(f"{'kind':6} {'solo/s':>9} {'target':>7} {'compute':16} {'mean':>6} {'min':>6} "
          f"{'max':>6} {'error pp':>8}")
    cells = [(k, p, "hard") for k in KINDS for p in (10, 30, 50, 70, 90)]
    cells.append(("gemm", 30, "work-conserving"))
    for kind, p, compute in cells:
        try:
            rate = solo(kind)["rate"]
            window = ["--compute-window", COMPUTE_WINDOW] if COMPUTE_WINDOW and compute == "hard" else []
            res = window_shares(run(kind, 9, tessera("--gpu-cores", str(p), "--compute", compute,
                                                     *window, "--gpu-memory", "16Gi")), kind)
        except RuntimeError as e:
            rate, res = None, {"error": str(e)}
        expect = 100 if compute == "work-conserving" else p
        row = {"kind": kind, "target": p, "compute": compute, "solo_rate": rate, **res}
        if "error" not in res:
            row["error_pp"] = res["mean"] - expect
        results["accuracy"].append(row)
        note = "  (alone: expect ~100)" if expect == 100 else ""
        print(f"{kind:6} {fmt(rate):>9} {p:>7} {compute:16} {fmt(row.get('mean')):>6} "
              f"{fmt(row.get('min')):>6} {fmt(row.get('max')):>6} "
              f"{fmt(row.get('error_pp'), '+.1f'):>8}{note}")


def pair_share(res, kind):
    return None if "error" in res else share(res["total"]["rate"], kind)


def splits():
    print("\n(b) splits: two containers at once (--compute hard), share = rate / solo rate, %")
    print(f"{'kind':6} {'target':>7} {'A':>6} {'B':>6} {'A+B':>6}")
    for kind, a, b in (("gemm", 10, 90), ("gemm", 30, 70), ("gemm", 50, 50), ("tiny", 30, 70)):
        try:
            procs = [start(kind, 12, tessera("--gpu-cores", str(p), "--compute", "hard",
                                             "--gpu-memory", "16Gi")) for p in (a, b)]
            got = [pair_share(finish(proc, 120), kind) for proc in procs]
        except RuntimeError as e:
            got = [None, None]
            print(e)
        results["splits"].append({"kind": kind, "target": [a, b], "share": got})
        total = None if None in got else got[0] + got[1]
        print(f"{kind:6} {f'{a}:{b}':>7} {fmt(got[0]):>6} {fmt(got[1]):>6} {fmt(total):>6}")
    reclaim()


def reclaim():
    """A (30 %, work-conserving) alone ~4 s, then B (70 %, work-conserving) beside it; 1 s windows
    placed on the wall clock by their end time."""
    try:
        solo("gemm")
    except RuntimeError as e:
        results["splits"].append({"case": "reclaim", "error": str(e)})
        print(f"reclaim: error ({e})")
        return
    wc = ("--compute", "work-conserving", "--gpu-memory", "16Gi")
    a = start("gemm", 16, tessera("--gpu-cores", "30", *wc), window=1)
    time.sleep(5.5)
    b_started = time.time()
    b = finish(start("gemm", 8, tessera("--gpu-cores", "70", *wc), window=1), 100)
    a = finish(a, 100)
    row = {"case": "reclaim", "b_started": b_started, "a": a, "b": b}
    if "error" not in a and "error" not in b:
        b_from = b["windows"][0]["end"] - b["windows"][0]["seconds"]
        before = [share(w["rate"], "gemm") for w in a["windows"] if w["end"] <= b_started]
        after = [share(w["rate"], "gemm") for w in a["windows"]
                 if w["end"] - w["seconds"] >= b_from and w["end"] <= b["windows"][-1]["end"]]
        row.update(a_before=statistics.fmean(before) if before else None,
                   a_after=statistics.fmean(after) if after else None,
                   b_after=pair_share(b, "gemm"))
    results["splits"].append(row)
    print(f"reclaim (work-conserving 30:70): A alone {fmt(row.get('a_before'))} (expect ~100); "
          f"with B: A {fmt(row.get('a_after'))}, B {fmt(row.get('b_after'))} (expect 30, 70)")


def paired(pairs):
    """Median of the paired differences (tessera - native) with a bootstrap 95 % CI."""
    row = {"pairs": len(pairs)}
    if not pairs:
        return row
    diffs = [t - n for n, t in pairs]
    rng = random.Random(1)
    boot = sorted(statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(2000))
    native = statistics.median(n for n, _ in pairs)
    row.update(native_median=native, tessera_median=statistics.median(t for _, t in pairs),
               diff_median=statistics.median(diffs), ci95=[boot[50], boot[1949]])
    row["diff_pct"] = 100 * row["diff_median"] / native
    row["ci95_pct"] = [100 * c / native for c in row["ci95"]]
    return row


def hook_calls(path, batches):
    """One `tessera run` of the enqueue workload with TESSERA_HOOK_STATS=1: {hook: calls}."""
    cmd = tessera("--gpu-memory", "16Gi") + [WORKLOAD, "enqueue", "--path", path,
                                             "--batches", str(batches)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TESSERA_HOOK_STATS": "1"})
    calls = {}
    for line in proc.stderr.splitlines():
        m = re.search(r"\] stats: (\w+) (\d+)$", line)
        if m:
            calls[m.group(1)] = int(m.group(2))
    return calls


def overhead():
    """Interleaved A/B processes of `compute_workload enqueue`, native vs a memory-only tessera
    run: each process times only the host's enqueue of batches of 32 empty-kernel launches
    (synchronized, untimed, between batches), through the runtime (<<<>>>) and the driver
    (cuLaunchKernel), and reports the median ns per launch over its batches. Per path: the
    median of the paired differences, % of native, bootstrap 95 % CI. Then the hooked driver
    calls per launch, from TESSERA_HOOK_STATS runs of two lengths (their difference)."""
    work = [WORKLOAD, "enqueue"]
    child = PINNED + work if PIN_SCOPE == "child" else work
    cmds = {"native": child, "tessera": tessera("--gpu-memory", "16Gi") + child}
    pin_all = (lambda: os.sched_setaffinity(0, PIN)) if PIN_SCOPE != "child" else None
    got = {"native": [], "tessera": []}  # per process: its enqueue line, or None
    for i in range(REPEATS):
        for name in (("native", "tessera") if i % 2 == 0 else ("tessera", "native")):
            try:
                out = subprocess.run(cmds[name], capture_output=True, text=True, timeout=120,
                                     preexec_fn=pin_all).stdout
                got[name].append([l for l in json_lines(out) if l.get("kind") == "enqueue"][0])
            except (subprocess.SubprocessError, OSError, IndexError):
                got[name].append(None)
    row = {"mode": "enqueue", "pin_scope": PIN_SCOPE, "native": got["native"],
           "tessera": got["tessera"], "paths": {}}
    for path in ("runtime", "driver"):
        key = f"{path}_median_ns"
        row["paths"][path] = paired([(n[key], t[key]) for n, t in zip(got["native"], got["tessera"])
                                     if n and t and key in n and key in t])
    results["overhead"] = row
    print(f"\n(d) overhead, no compute cap: host enqueue of an empty kernel, ns/launch (median "
          f"over batches per process; pinned to one CPU: {PIN_SCOPE})")
    print(f"{'path':8} {'native':>8} {'tessera':>8} {'diff':>7} {'95% CI':>17} {'% of native':>12} "
          f"{'pairs':>5}")
    for path, r in row["paths"].items():
        if not r["pairs"]:
            print(f"{path:8} error")
            continue
        ci = f"[{r['ci95'][0]:+.1f}, {r['ci95'][1]:+.1f}]"
        print(f"{path:8} {r['native_median']:8.1f} {r['tessera_median']:8.1f} "
              f"{r['diff_median']:+7.1f} {ci:>17} {r['diff_pct']:+11.2f}% {r['pairs']:>5}  "
              f"(CI {r['ci95_pct'][0]:+.2f}% .. {r['ci95_pct'][1]:+.2f}%)")

    short, long_ = 100, 1100  # batches of 32; the difference is 32,000 launches a path
    launches = (long_ - short) * 32
    row["hook_calls"] = {}
    print(f"\n(d) hooked driver calls under tessera run (TESSERA_HOOK_STATS=1): per launch = "
          f"(calls at {long_} - at {short} batches of 32) / {launches}")
    for path in ("runtime", "driver"):
        try:
            counts = {b: hook_calls(path, b) for b in (short, long_)}
        except (subprocess.SubprocessError, OSError) as e:
            row["hook_calls"][path] = {"error": str(e)}
            print(f"{path:8} error ({e})")
            continue
        per = {h: (counts[long_].get(h, 0) - counts[short].get(h, 0)) / launches
               for h in sorted(set(counts[short]) | set(counts[long_]))}
        row["hook_calls"][path] = {"calls": {str(b): c for b, c in counts.items()},
                                   "per_launch": {h: v for h, v in per.items() if v}}
        shown = ", ".join(f"{h} {v:.4f}" for h, v in per.items() if v) or "none"
        print(f"{path:8} {shown}")


def save():
    with open(os.path.join(OUT, "compute_shares.json"), "w") as f:
        json.dump(results, f, indent=1)


for part, fn in (("a", accuracy), ("b", splits), ("d", overhead)):
    if part in PARTS:
        fn()
        save()
