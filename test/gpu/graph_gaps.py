"""What a CUDA graph's span holds beyond its kernels (issue "compute shares and priority that
hold on any workload", ADR 0017): the governor times a graph launch between two events, and the
share charges busy time, the union of the kernels' intervals. CUPTI's kernel records (through
torch.profiler) give, per replay of each graph shape, the kernels' union, the span from the first
kernel's start to the last one's end, and the gaps between consecutive kernels; an event bracket
around each replay (torch.cuda.Event) gives what an event-timed probe sees.

  graph_gaps.py [--seconds S]     one JSON line per shape, then a table

Shapes (PyTorch elementwise ops captured into a graph, replayed with ~300 us of host work between
replays so that replays do not touch):
  chainN_E     N dependent kernels (one stream) on an E-element tensor
  forkN_E      two branches of N/2 dependent kernels each, captured on two streams
"""
import argparse
import json
import statistics
import time


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def build(torch, kind, n, elements):
    xs = [torch.ones(elements, device="cuda") for _ in range(2)]
    side = [torch.cuda.Stream() for _ in range(2)]
    for s in side:
        s.wait_stream(torch.cuda.current_stream())
    for s, x in zip(side, xs):  # warm the kernels outside capture
        with torch.cuda.stream(s):
            x.mul_(1.0001)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        if kind == "chain":
            for _ in range(n):
                xs[0].mul_(1.0001)
        else:  # fork: two branches on two streams, joined at the end
            main = torch.cuda.current_stream()
            for s in side:
                s.wait_stream(main)
            for s, x in zip(side, xs):
                with torch.cuda.stream(s):
                    for _ in range(n // 2):
                        x.mul_(1.0001)
            for s in side:
                main.wait_stream(s)
    return g


def measure(torch, name, seconds):
    kind, rest = name[:5], name[5:]
    n, elements = (int(v) for v in rest.split("_"))
    g = build(torch, kind, n, elements)
    for _ in range(10):
        g.replay()
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile
    brackets = []
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            brackets.append(a.elapsed_time(b) * 1000.0)  # us
            spin(300e-6)
    kernels = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                     if e.device_type == torch.autograd.DeviceType.CUDA)
    replays, cur = [], []
    for k in kernels:  # replays are apart by the 300 us of host work
        if cur and k[0] - max(e for _, e in cur) > 100:
            replays.append(cur)
            cur = []
        cur.append(k)
    if cur:
        replays.append(cur)
    replays = [r for r in replays if len(r) == n]
    spans, unions, gaps, kernel_us = [], [], [], []
    for r in replays:
        union, end = 0.0, None
        for a, b in r:
            if end is None or a > end:
                union += b - a
                end = b
            elif b > end:
                union += b - end
                end = b
        spans.append(max(b for _, b in r) - r[0][0])
        unions.append(union)
        kernel_us.extend(b - a for a, b in r)
        if kind == "chain":
            gaps.extend(r[i + 1][0] - r[i][1] for i in range(len(r) - 1))
    med = statistics.median
    row = {"shape": name, "replays": len(replays), "kernels": n,
           "kernel_us": med(kernel_us), "span_us": med(spans), "union_us": med(unions),
           "bracket_us": med(brackets), "gap_us": med(gaps) if gaps else None,
           "gap_p10_p90": [sorted(gaps)[len(gaps) // 10], sorted(gaps)[9 * len(gaps) // 10]]
           if gaps else None}
    row["span_over_union"] = row["span_us"] / row["union_us"]
    row["bracket_over_union"] = row["bracket_us"] / row["union_us"]
    print(json.dumps(row), flush=True)
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=2)
    p.add_argument("--shapes", default="chain64_4096 chain16_4096 chain64_1048576 "
                                       "chain8_16777216 fork64_4096")
    a = p.parse_args()
    import torch
    torch.cuda.init()
    rows = [measure(torch, s, a.seconds) for s in a.shapes.split()]
    print(f"{'shape':18} {'kernel':>7} {'gap':>6} {'union':>8} {'span':>8} {'bracket':>8} "
          f"{'span/u':>7} {'brk/u':>7}")
    for r in rows:
        gap = f"{r['gap_us']:6.2f}" if r["gap_us"] is not None else "     -"
        print(f"{r['shape']:18} {r['kernel_us']:7.2f} {gap} {r['union_us']:8.1f} "
              f"{r['span_us']:8.1f} {r['bracket_us']:8.1f} {r['span_over_union']:7.3f} "
              f"{r['bracket_over_union']:7.3f}")


main()
