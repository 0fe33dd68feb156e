"""How many launches a stream's queue holds before a launch blocks for room (the bound under which
the preload library holds a probe's stream at its gate: src/governor/fences.cc).

One CuPy stream: a kernel that spins on %globaltimer for --spin-ms, then --launches tiny kernels
launched behind it, each launch call timed on the host. While the queue has room a call returns
in microseconds; once it is full a call waits for the spinning kernel (or, later, for one queued
launch to finish). Prints one JSON line: the first launch index whose call took over --block-us,
and the call times around it. --params adds that many bytes of kernel parameters a launch (a queue
may count bytes rather than entries). Run it alone on an idle GPU.
"""
import argparse
import json
import time

import cupy as cp
import numpy as np

SOURCE = r"""
extern "C" __global__ void spin(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t0));
  do { asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
struct Pad { unsigned long long w[PAD_WORDS]; };
extern "C" __global__ void tiny(float* x, Pad pad) {
  if (threadIdx.x == 0 && pad.w[0] == 1) x[0] += 1.0f;
}
"""


def measure(launches, spin_ms, block_us, pad_words):
    mod = cp.RawModule(code=SOURCE.replace("PAD_WORDS", str(max(1, pad_words))))
    spin, tiny = mod.get_function("spin"), mod.get_function("tiny")
    x = cp.zeros(1, dtype=cp.float32)
    # The struct as a NumPy structured scalar (CuPy passes it by value).
    pad_arg = np.zeros(1, dtype=np.dtype([("w", np.uint64, (max(1, pad_words),))]))[0]
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        tiny((1,), (32,), (x, pad_arg))  # loads the module before the timing
        stream.synchronize()
        spin((1,), (1,), (cp.uint64(spin_ms * 1_000_000),))
        calls = []
        for _ in range(launches):
            t0 = time.perf_counter_ns()
            tiny((1,), (32,), (x, pad_arg))
            calls.append(time.perf_counter_ns() - t0)
        stream.synchronize()
    first = next((i for i, c in enumerate(calls) if c > block_us * 1000), None)
    around = calls[max(0, first - 3):first + 3] if first is not None else []
    return {"launches": launches, "spin_ms": spin_ms, "param_bytes": 8 * max(1, pad_words),
            "first_blocked": first, "calls_around_us": [round(c / 1000, 1) for c in around],
            "median_call_us": round(sorted(calls)[len(calls) // 2] / 1000, 2)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--launches", type=int, default=20000)
    p.add_argument("--spin-ms", type=int, default=1000)
    p.add_argument("--block-us", type=float, default=1000)
    p.add_argument("--params", type=int, nargs="*", default=[8, 1024])
    a = p.parse_args()
    for params in a.params:
        try:
            got = measure(a.launches, a.spin_ms, a.block_us, max(1, params // 8))
        except Exception as e:  # (a CuPy that cannot pass the struct: the other sizes still run)
            got = {"param_bytes": params, "error": str(e)[:300]}
        print(json.dumps(got), flush=True)


main()
