"""Compute shares charge busy time (issue "compute shares and priority that hold on any
workload", ADR 0017): a job that alone keeps the GPU busy a fraction b of the time runs at
min(1, s / b) of its solo rate under a share s. Python drives the GPU (PyTorch); tessera is the
C++ build under test.

  busy_shares.py work SHAPE --seconds S     one workload; prints {"t","dt","units"} per second
  busy_shares.py trace SHAPE --seconds S    the same alone under torch.profiler (CUPTI): prints
                                            {"busy_per_unit": union of its kernels' intervals
                                            per unit of work, "mean_kernel_us", ...}
  busy_shares.py drive BUILD OUT [--before BUILD0]
                                            the table below; writes OUT/busy_shares.json
  busy_shares.py accuracy BUILD OUT         the busy fraction CUPTI sees under each share against
                                            min(S, b), in one run (accuracy's docstring);
                                            writes OUT/busy_accuracy.json

Shapes (all from PyTorch, none tuned to tessera):
  launchbound  elementwise ops on a 4096-element tensor, back to back from Python (kernels of a
               few us, the GPU idles between them), a synchronize every 256 ops
  graphs       a CUDA graph of 64 tiny elementwise kernels, replayed and synchronized, then ~300 us
               of host work before the next replay
  streams      four streams, each a loop of 1024x1024x1024 bf16 matrix products (kernels that do
               not fill the GPU, so the streams' kernels overlap), a synchronize every 32 rounds
  procs        two processes of one container, each a loop of 8192^3 bf16 matrix products
               (time-sliced against each other)
  procslb      two processes of one container, each the launch-bound loop (their contexts
               time-sliced: the container's busy time is the union of both processes' kernels)
  cupy         CuPy (its own kernels, launched through the driver API rather than PyTorch's
               runtime): elementwise ops on a 16384-element array with ~20 us of host work every
               8 ops, a synchronize every 128 ops
  cupystream   the same on a CuPy stream of its own (non-blocking): unthrottled it floods the
               stream's queue, where a probe held at the gate blocked the launch (session 16)
  jaxlb        JAX (XLA's launches through the CUDA runtime it ships; never tuned on): a jitted
               elementwise step on an array of 2^23 floats (kernels of ~15 us) dispatched back to
               back from Python (~35 us a dispatch), blocked on every 64 steps; run only where
               SHAPES names it
  decode       a transformer decode step at batch 1 (PyTorch, fp16: six layers of layer norm, a
               fused QKV product, attention over a 256-token cache, an MLP), one token a step,
               its argmax read back each token (kernels of 3-20 us, ~100 a token); run only
               where SHAPES names it
  cupy8        CuPy on eight non-blocking streams of its own, an elementwise op on 2^20 floats
               on each in turn, a device synchronize every 64 rounds; run only where SHAPES names it

drive: per shape, the solo rate (mean of the per-second units over the middle of the run) and
b = busy time per unit from the solo trace (independent of tessera: CUPTI's kernel records) x the
solo rate (the profiler slows the host, so its own busy fraction would understate b), then `tessera run
--gpu-cores S` for S in SHARES (default 10 30 50 90): delivered = rate / solo rate (with
REPEATS=N, the median of N interleaved solo/governed pairs), expected min(1, S / b); then the
overhead of governed launches when the share does not bind: the launch-bound loop at
--gpu-cores 90 against native, PAIRS (default 5) interleaved pairs. With --before BUILD0 each
pair becomes a triple (solo, BUILD0 governed, BUILD governed), so that a change's delivered rate
is set beside its baseline's in the same run (column "before").
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

from jsonl import json_lines  # beside this script

SELF = [sys.executable, os.path.abspath(__file__)]
SHAPES = ("launchbound", "graphs", "streams", "procs", "procslb", "cupy", "cupystream")
# Shapes of two processes of one container: what each process runs.
CHILDREN = {"procs": "gemm", "procslb": "launchbound"}


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def workload(shape):
    """Returns step(): one unit of the shape's work (it synchronizes where the shape says)."""
    import torch
    if shape == "launchbound":
        x = torch.ones(4096, device="cuda")

        def step():
            for _ in range(256):
                x.mul_(1.0001).add_(1e-4)
            torch.cuda.synchronize()
        return step, 512  # kernels per unit
    if shape == "graphs":
        x = torch.ones(4096, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                x.mul_(1.0001).add_(1e-4)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(32):
                x.mul_(1.0001).add_(1e-4)

        def step():
            g.replay()
            torch.cuda.synchronize()
            spin(300e-6)
        return step, 1
    if shape == "streams":
        streams = [torch.cuda.Stream() for _ in range(4)]
        mats = [(torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16),
                 torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)) for _ in streams]
        outs = [torch.empty(1024, 1024, device="cuda", dtype=torch.bfloat16) for _ in streams]

        def step():
            for _ in range(32):
                for s, (a, b), o in zip(streams, mats, outs):
                    with torch.cuda.stream(s):
                        torch.mm(a, b, out=o)
            torch.cuda.synchronize()
        return step, 128
    if shape == "gemm":
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        o = torch.empty_like(a)

        def step():
            for _ in range(4):
                torch.mm(a, b, out=o)
            torch.cuda.synchronize()
        return step, 4
    if shape in ("cupy", "cupystream"):
        import cupy as cp
        y = cp.ones(16384, dtype=cp.float32)
        stream = cp.cuda.Stream(non_blocking=True) if shape == "cupystream" else cp.cuda.Stream.null

        def step():
            with stream:
                for i in range(128):
                    cp.multiply(y, cp.float32(1.0001), out=y)
                    if i % 8 == 7:
                        spin(20e-6)
            cp.cuda.Device().synchronize()
        return step, 128
    if shape == "jaxlb":
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        import jax
        import jax.numpy as jnp
        f = jax.jit(lambda v: v * 1.0001 + 1e-4)
        state = [jnp.ones(1 << 23, dtype=jnp.float32)]

        def step():
            v = state[0]
            for _ in range(64):
                v = f(v)
            state[0] = v.block_until_ready()
        return step, 64
    if shape == "decode":
        import torch.nn.functional as F
        torch.manual_seed(0)
        d, heads, ctx, layers = 1024, 16, 256, 6
        half = dict(device="cuda", dtype=torch.float16)
        weights = [[torch.randn(d, 3 * d, **half) * 0.02, torch.randn(d, d, **half) * 0.02,
                    torch.randn(d, 4 * d, **half) * 0.02, torch.randn(4 * d, d, **half) * 0.02]
                   for _ in range(layers)]
        keys = torch.randn(layers, heads, ctx, d // heads, **half)
        values = torch.randn(layers, heads, ctx, d // heads, **half)
        x = torch.randn(1, d, **half)

        def step():
            h = x
            for layer, (wqkv, wo, w1, w2) in enumerate(weights):
                q, _, _ = (F.layer_norm(h, (d,)) @ wqkv).split(d, dim=-1)
                att = torch.softmax(q.view(heads, 1, d // heads) @ keys[layer].transpose(-1, -2)
                                    * (d // heads) ** -0.5, dim=-1)
                h = h + (att @ values[layer]).reshape(1, d) @ wo
                h = h + F.gelu(F.layer_norm(h, (d,)) @ w1) @ w2
            int(h.argmax())  # the next token's id, read back as a sampler does
        return step, 1
    if shape == "cupy8":
        import cupy as cp
        streams = [cp.cuda.Stream(non_blocking=True) for _ in range(8)]
        arrays = [cp.ones(1 << 20, dtype=cp.float32) for _ in streams]

        def step():
            for _ in range(64):
                for stream, a in zip(streams, arrays):
                    with stream:
                        cp.multiply(a, cp.float32(1.0001), out=a)
            cp.cuda.Device().synchronize()
        return step, 512
    raise SystemExit(f"unknown shape {shape}")


def work(shape, seconds):
    if shape in CHILDREN:  # two processes of one container: the children inherit its environment
        children = [subprocess.Popen(SELF + ["work", CHILDREN[shape], "--seconds", str(seconds),
                                             "--tag", str(i)], stdout=sys.stdout)
                    for i in range(2)]
        signal.signal(signal.SIGTERM, lambda *_: [c.terminate() for c in children])
        for c in children:
            c.wait()
        return
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    step, _ = workload(shape)
    for _ in range(20):
        step()
    units, last_units, last_t = 0, 0, time.time()
    end = last_t + seconds
    while not stop and time.time() < end:
        step()
        units += 1
        now = time.time()
        if now - last_t >= 1.0:
            print(json.dumps({"t": now, "dt": now - last_t, "units": units - last_units}),
                  flush=True)
            last_t, last_units = now, units


def merged(spans):
    """The union of (start, end) intervals as sorted disjoint intervals."""
    out = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def trace_children(shape, seconds):
    """Two processes of one container, each profiled (CUPTI records one process's kernels): they
    start profiling together (a barrier of files), each writes its kernels' union on the
    profiler's clock (one clock for the machine), and the container's busy fraction is the
    union of both over the window in which both were profiled."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        children = [subprocess.Popen(SELF + ["trace", CHILDREN[shape], "--seconds", str(seconds),
                                             "--tag", str(i), "--barrier", tmp, "--parties", "2"],
                                     stdout=subprocess.PIPE, text=True) for i in range(2)]
        rows = [next((l for l in json_lines(c.communicate()[0]) if "busy_per_unit" in l), None)
                for c in children]
        if any(r is None for r in rows) or any(c.returncode for c in children):
            raise SystemExit(f"{shape}: a child's trace failed")
        unions = []
        for i in range(2):
            with open(os.path.join(tmp, f"spans.{i}.json")) as f:
                unions.append(json.load(f))
    begin = max(u[0][0] for u in unions)
    end = min(u[-1][1] for u in unions)
    busy = sum(max(0.0, min(b, end) - max(a, begin))
               for a, b in merged([s for u in unions for s in u]))
    units = sum(r["units"] for r in rows)
    rate = sum(r["rate"] for r in rows)
    # busy_sum: each process's busy fraction over its own wall time, summed (time-sliced contexts'
    # kernels do not overlap: alone on the H200 the union was 10.19 % against a sum of 10.31 %).
    # Under a binding share the window both were profiled in came out short (the union 1.9 %
    # against a sum of 6.1 % at 5 %, session 17): both are printed.
    print(json.dumps({"busy": busy / (end - begin), "busy_sum": sum(r["busy"] for r in rows),
                      "kernels": sum(r["kernels"] for r in rows),
                      "units": units, "wall": (end - begin) / 1e6, "rate": rate,
                      "busy_per_unit": busy / (end - begin) / rate,
                      "mean_kernel_us": statistics.mean(r["mean_kernel_us"] for r in rows),
                      "children_busy": [r["busy"] for r in rows], "top": rows[0]["top"]}))


def trace(shape, seconds, tag="", barrier=None, parties=1):
    if shape in CHILDREN:
        return trace_children(shape, seconds)
    import torch
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.init()  # CUPTI records every kernel of the process, CuPy's too
    step, _ = workload(shape)
    for _ in range(20):
        step()
    if barrier:  # every party warmed up before any profiles
        open(os.path.join(barrier, f"ready.{tag}"), "w").close()
        while sum(n.startswith("ready.") for n in os.listdir(barrier)) < parties:
            time.sleep(0.001)
    units = 0
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            step()
            units += 1
        wall = time.perf_counter() - t0
    gpu = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    spans = sorted((e.time_range.start, e.time_range.end) for e in gpu)
    intervals = merged(spans)
    union = sum(b - a for a, b in intervals)
    if barrier:  # the union on the profiler's clock (microseconds), shared by the processes
        results = prof.profiler.kineto_results
        start_us = (results.trace_start_ns() / 1e3 if hasattr(results, "trace_start_ns")
                    else results.trace_start_us())
        with open(os.path.join(barrier, f"spans.{tag}.json"), "w") as f:
            json.dump([[start_us + a, start_us + b] for a, b in intervals], f)
    # The profiler slows the host's launches (a launch-bound loop runs slower under it), so the
    # fraction busy under it understates b; busy time per unit of work does not depend on the
    # host's pace: b = busy_per_unit x the unprofiled solo rate (drive).
    by_name = {}
    for e in gpu:
        by_name[e.name] = by_name.get(e.name, 0.0) + e.time_range.end - e.time_range.start
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:3]
    print(json.dumps({"busy": union / 1e6 / wall, "kernels": len(spans), "units": units,
                      "wall": wall, "rate": units / wall,
                      "busy_per_unit": union / 1e6 / units,
                      "mean_kernel_us": sum(b - a for a, b in spans) / max(1, len(spans)),
                      "top": [[n[:60], round(t / 1e6 / wall, 4)] for n, t in top]}))


# ---- drive


def run(cmd, timeout):
    # CPUS=4-7: every run on the same cores (a launch-bound loop's solo rate moved by 20-50 %
    # between calls on the H200, with the cores it landed on).
    if os.environ.get("CPUS"):
        cmd = ["taskset", "-c", os.environ["CPUS"]] + cmd
    # NOASLR=1: every run with the same address layout (setarch -R; with PYTHONHASHSEED fixed, the
    # interpreter's own layout too), so that runs differ by what they run, not where it landed.
    if os.environ.get("NOASLR") == "1":
        cmd = ["setarch", os.uname().machine, "-R"] + cmd
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    return proc.returncode, list(json_lines(out)), err


def rate(shape, prefix, seconds):
    """Units per second over the run's seconds after the first two (both processes summed)."""
    rc, lines, err = run(prefix + SELF + ["work", shape, "--seconds", str(seconds)], seconds + 120)
    seconds_lines = [l for l in lines if "units" in l]
    if rc != 0 or not seconds_lines:
        return None, err.strip()[-300:]
    t0 = min(l["t"] for l in seconds_lines)
    kept = [l for l in seconds_lines if l["t"] - t0 >= 2.0]
    span = max(l["t"] for l in kept) - min(l["t"] - l["dt"] for l in kept)
    return sum(l["units"] for l in kept) / span, [l for l in err.splitlines()
                                                  if l.startswith("tessera run")]


def drive(build, out, before=None):
    sys.stdout.reconfigure(line_buffering=True)

    def tessera_of(b):
        return [os.path.join(b, "cmd/tessera/tessera"), "run", "--gpu-memory", "24Gi"]

    tessera = tessera_of(build)
    baseline = tessera_of(before) if before else None
    shares = [int(s) for s in os.environ.get("SHARES", "10 30 50 90").split()]
    seconds = int(os.environ.get("SECONDS_PER_RUN", "8"))
    repeats = max(1, int(os.environ.get("REPEATS", "1")))
    results = {"date": time.strftime("%Y-%m-%d %H:%M"), "shapes": {}, "overhead": None}
    print(f"{'shape':12} {'b':>5} {'solo/s':>9} {'share':>6} {'delivered':>9} {'expected':>9} "
          f"{'error pp':>8}" + (f" {'before':>8}" if baseline else ""))
    for shape in os.environ.get("SHAPES", " ".join(SHAPES)).split():
        rc, lines, err = run(SELF + ["trace", shape, "--seconds", "3"], 200)
        traced = next((l for l in lines if "busy_per_unit" in l), None)
        solo, _ = rate(shape, [], seconds)
        # b: the solo run's busy fraction, from the traced busy time per unit of work and the
        # unprofiled solo rate (for procs, both processes' units: their demand, at most 1).
        b = min(1.0, traced["busy_per_unit"] * solo) if traced and solo else None
        row = {"b": b, "solo_rate": solo, "trace": traced,
               "trace_error": None if b else err[-300:], "shares": []}
        for s in shares:
            # REPEATS > 1: that many interleaved (solo, governed) pairs, the median ratio (a
            # shape's solo rate moved by 20-50 % between calls on the H200).
            pairs, before_pairs = [], []
            for r in range(repeats):
                pair_solo = solo if r == 0 else rate(shape, [], seconds)[0]
                if baseline:
                    old, _ = rate(shape, baseline + ["--gpu-cores", str(s), "--"], seconds)
                    if old is not None and pair_solo:
                        before_pairs.append((pair_solo, old))
                got, notes = rate(shape, tessera + ["--gpu-cores", str(s), "--"], seconds)
                if got is not None and pair_solo:
                    pairs.append((pair_solo, got))
            got = pairs[len(pairs) // 2][1] if pairs else None
            cell = {"share": s, "rate": got, "notes": notes, "pairs": pairs}
            if pairs and b:
                ratios = sorted(g / n for n, g in pairs)
                # Where the share binds, min(1, s/b) x solo = s / busy_per_unit: the governed
                # rate the share allows by the solo trace's busy time per unit, which the solo
                # run's noise (its rate moved 320-570 units/s within one call on the H200) does
                # not enter. share_use: the governed rates' median against it.
                if s / 100 < b:
                    cell["share_use"] = (statistics.median(g for _, g in pairs) *
                                         traced["busy_per_unit"] / (s / 100))
                cell["delivered"] = statistics.median(ratios)
                cell["delivered_range"] = [ratios[0], ratios[-1]]
                cell["expected"] = min(1.0, s / 100 / b)
                cell["error_pp"] = 100 * (cell["delivered"] - cell["expected"])
            if before_pairs:
                ratios = sorted(g / n for n, g in before_pairs)
                cell["before"] = {"pairs": before_pairs, "delivered": statistics.median(ratios),
                                  "delivered_range": [ratios[0], ratios[-1]]}
            row["shares"].append(cell)
            print(f"{shape:12} {b if b is not None else float('nan'):5.2f} "
                  f"{solo if solo else float('nan'):9.1f} {s:6} "
                  f"{100 * cell.get('delivered', float('nan')):8.1f}% "
                  f"{100 * cell.get('expected', float('nan')):8.1f}% "
                  f"{cell.get('error_pp', float('nan')):+8.1f}" +
                  (f" share_use {cell['share_use']:.3f}" if "share_use" in cell else "") +
                  (f" {100 * cell.get('before', {}).get('delivered', float('nan')):7.1f}%"
                   if baseline else ""))
        results["shapes"][shape] = row
        with open(os.path.join(out, "busy_shares.json"), "w") as f:
            json.dump(results, f, indent=1)
    pairs = []
    overhead_seconds = int(os.environ.get("OVERHEAD_SECONDS", "6"))
    for i in range(int(os.environ.get("PAIRS", "5"))):
        # ABBA: every other pair runs the governed one first (a drift over the call cancels).
        order = ("native", "governed") if i % 2 == 0 else ("governed", "native")
        got = {}
        for which in order:
            prefix = [] if which == "native" else tessera + ["--gpu-cores", "90", "--"]
            got[which], _ = rate("launchbound", prefix, overhead_seconds)
        native, governed = got["native"], got["governed"]
        if native and governed:
            pairs.append((native, governed))
            print(f"pair {i}: native {native:.1f}/s governed {governed:.1f}/s "
                  f"ratio {governed / native:.4f}")
    if pairs:
        ratios = sorted(g / n for n, g in pairs)
        # A 95 % interval of the median ratio: bootstrap over the pairs (fixed seed).
        import random
        rng = random.Random(21)
        boot = sorted(statistics.median(rng.choice(ratios) for _ in ratios) for _ in range(2000))
        results["overhead"] = {"pairs": pairs, "ratios": ratios,
                               "median_ratio": statistics.median(ratios),
                               "median_ci95": [boot[50], boot[1949]],
                               "seconds": overhead_seconds}
        print(f"overhead median ratio 95 % interval {boot[50]:.4f} .. {boot[1949]:.4f}")
        print(f"\noverhead, launch-bound loop at --gpu-cores 90 (does not bind): governed / native "
              f"median {statistics.median(ratios):.4f} over {len(pairs)} interleaved pairs "
              f"(min {ratios[0]:.4f}, max {ratios[-1]:.4f})")
    with open(os.path.join(out, "busy_shares.json"), "w") as f:
        json.dump(results, f, indent=1)


def accuracy(build, out):
    """The share's own definition checked inside one run: under `tessera run --gpu-cores S` the
    workload runs under torch.profiler, and CUPTI's kernel records (independent of tessera) give
    the fraction of the wall time its kernels kept the GPU busy; it must be min(S, b) where b is
    the same profiled workload's busy fraction alone. Unlike the delivered rate, this does not
    depend on the host's pace from one process to the next (the launch-bound loop's solo rate
    moved by a quarter between runs on the H200), and it holds also where running under a share
    changes how much busy time a unit of work takes (streams whose kernels overlap more when
    released together). Shares: SHARES, plus a quarter, half and three quarters of b (a profiled
    launch-bound loop's b is below 10 %)."""
    sys.stdout.reconfigure(line_buffering=True)
    tessera = [os.path.join(build, "cmd/tessera/tessera"), "run", "--gpu-memory", "24Gi"]
    seconds = os.environ.get("TRACE_SECONDS", "3")
    results = {"date": time.strftime("%Y-%m-%d %H:%M"), "method": "accuracy", "shapes": {}}
    print(f"{'shape':12} {'share':>6} {'busy':>7} {'expected':>8} {'error pp':>8} {'rel':>6} "
          f"{'rate':>8} {'delivered':>9} {'expected':>8}")

    def traced(prefix, shape):
        rc, lines, err = run(prefix + SELF + ["trace", shape, "--seconds", seconds], 300)
        got = next((l for l in lines if "busy_per_unit" in l), None)
        return got, [l for l in err.splitlines() if l.startswith("tessera run")] or err[-300:]

    for shape in os.environ.get("SHAPES", "launchbound graphs streams cupy cupystream gemm").split():
        solo, err = traced([], shape)
        row = {"solo": solo, "solo_error": None if solo else err, "shares": []}
        results["shapes"][shape] = row
        if not solo:
            print(f"{shape:12} solo trace failed: {err}")
            continue
        b = solo["busy"]
        shares = {int(s) for s in os.environ.get("SHARES", "10 30 50 90").split()}
        shares |= {max(1, round(100 * b * f)) for f in (0.25, 0.5, 0.75)}
        # ORDER=desc: the largest share first (whether a trend across the shares is the host's
        # drift over the call rather than the share).
        for s in sorted(shares, reverse=os.environ.get("ORDER") == "desc"):
            got, notes = traced(tessera + ["--gpu-cores", str(s), "--"], shape)
            cell = {"share": s, "trace": got, "notes": notes}
            if got:
                cell["expected_busy"] = min(s / 100, b)
                cell["error_pp"] = 100 * (got["busy"] - cell["expected_busy"])
                cell["delivered"] = got["rate"] / solo["rate"]
                cell["expected_delivered"] = min(1.0, s / 100 / b)
                print(f"{shape:12} {s:6} {100 * got['busy']:6.1f}% "
                      f"{100 * cell['expected_busy']:7.1f}% {cell['error_pp']:+8.1f} "
                      f"{got['busy'] / cell['expected_busy']:6.3f} {got['rate']:8.1f} "
                      f"{100 * cell['delivered']:8.1f}% {100 * cell['expected_delivered']:7.1f}%")
            else:
                print(f"{shape:12} {s:6} governed trace failed: {notes}")
            row["shares"].append(cell)
        print(f"{shape:12} solo: b {100 * b:.1f}%, {solo['rate']:.1f} units/s, "
              f"mean kernel {solo['mean_kernel_us']:.2f} us, top {solo['top']}")
        with open(os.path.join(out, "busy_accuracy.json"), "w") as f:
            json.dump(results, f, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("work", "trace"):
        q = sub.add_parser(name)
        q.add_argument("shape", choices=SHAPES + ("gemm", "jaxlb", "decode", "cupy8"))
        q.add_argument("--seconds", type=float, default=8)
        q.add_argument("--tag", default="")
        q.add_argument("--barrier", help="trace: a folder where PARTIES processes meet")
        q.add_argument("--parties", type=int, default=1)
    for name in ("drive", "accuracy"):
        d = sub.add_parser(name)
        d.add_argument("build")
        d.add_argument("out")
        if name == "drive":
            d.add_argument("--before", help="a baseline build, run in the same pairs")
    a = p.parse_args()
    if a.cmd == "work":
        work(a.shape, a.seconds)
    elif a.cmd == "trace":
        trace(a.shape, a.seconds, a.tag, a.barrier, a.parties)
    elif a.cmd == "accuracy":
        accuracy(a.build, a.out)
    else:
        drive(a.build, a.out, a.before)


main()
