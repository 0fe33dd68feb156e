"""What a gated probe counts beyond its kernel (ADR 0017, busy-time accounting).

A probe brackets one launch with two events behind a gate (the stream waits on a word of pinned
host memory until the launch and its end event are queued). Its span is more than the kernel's
own time as a kernel trace (CUPTI) reports it: the events' own processing and the launch's setup
on the GPU. This script measures, for kernels of very different lengths, the probe's span, the
kernel's CUPTI record and its time on the SMs (%globaltimer, first block start to last block end),
so that the difference can be seen to be a constant or not, and how the on-SM time relates.
The kernel "control" is the governor's control kernel (an empty kernel of one block of 32 threads,
launch_hooks.cc): its CUPTI record is TESSERA_PROBE_CONTROL_NS for this GPU model.

  probe_offset.py [--runs N]      prints one JSON line per kernel, then a summary line
"""
import argparse
import ctypes
import json
import statistics
import time

import cupy as cp
import torch
from torch.profiler import ProfilerActivity, profile

import timed_kernels  # beside this script

SOURCE = timed_kernels.SOURCE + r"""
extern "C" __global__ void sleeper(int ns, unsigned long long* span) {
  unsigned long long t0 = now();
  while (now() - t0 < (unsigned long long)ns) {}
  __syncthreads();
  if (threadIdx.x == 0) { atomicMin(&span[0], t0); atomicMax(&span[1], now()); }
}
extern "C" __global__ void control() {}
"""


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=400)
    a = p.parse_args()
    torch.cuda.init()
    module = cp.RawModule(code=SOURCE)
    scale, sleeper = module.get_function("scale"), module.get_function("sleeper")
    control = module.get_function("control")
    cuda = ctypes.CDLL("libcuda.so.1")
    cp.cuda.Device().synchronize()  # (the context exists)
    word_ptr = ctypes.c_void_p()
    rc = cuda.cuMemHostAlloc(ctypes.byref(word_ptr), ctypes.c_size_t(64), 0x1 | 0x2)
    assert rc == 0, f"cuMemHostAlloc: {rc}"
    word = ctypes.c_uint32.from_address(word_ptr.value)
    word.value = 0
    word_dev = ctypes.c_uint64()
    rc = cuda.cuMemHostGetDevicePointer_v2(ctypes.byref(word_dev), word_ptr, 0)
    assert rc == 0, f"cuMemHostGetDevicePointer: {rc}"
    stream = cp.cuda.Stream(non_blocking=True)
    spans = cp.zeros(2 * a.runs, dtype=cp.uint64)
    seq = [0]

    shapes = [("empty", None, None), ("control", control, lambda i: ((1,), (32,), ()))]
    for n in (4096, 65536, 1 << 20, 1 << 24):
        x = cp.ones(n, dtype=cp.float32)
        shapes.append((f"scale n={n}", scale, lambda i, x=x, n=n: (((n + 255) // 256,), (256,),
                                                                    (x, cp.int32(n), spans[2 * i:]))))
    for ns in (2000, 10000, 50000):
        shapes.append((f"sleep {ns // 1000}us", sleeper, lambda i, ns=ns: ((132,), (128,),
                                                                         (cp.int32(ns), spans[2 * i:]))))
    results = []
    for name, fn, args in shapes:
        init = cp.zeros(2 * a.runs, dtype=cp.uint64)
        init[0::2] = cp.uint64(2**64 - 1)
        spans[:] = init
        cp.cuda.Device().synchronize()
        brackets = []
        begin, end = cp.cuda.Event(), cp.cuda.Event()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(a.runs):
                seq[0] += 1
                rc = cuda.cuStreamWaitValue32_v2(ctypes.c_void_p(stream.ptr), word_dev,
                                                 ctypes.c_uint32(seq[0]), 0)
                assert rc == 0, f"cuStreamWaitValue32: {rc}"
                begin.record(stream)
                if fn is not None:
                    grid, block, fargs = args(i)
                    fn(grid, block, fargs, stream=stream)
                end.record(stream)
                word.value = seq[0]
                end.synchronize()
                brackets.append(cp.cuda.get_elapsed_time(begin, end) * 1000.0)
                spin(20e-6)
        cupti = [(e.time_range.end - e.time_range.start) for e in prof.events()
                 if e.device_type == torch.autograd.DeviceType.CUDA
                 and "memset" not in e.name.lower() and "memcpy" not in e.name.lower()]
        host = spans.get()
        on_sm = ([(host[2 * i + 1] - host[2 * i]) / 1000.0 for i in range(a.runs)]
                 if fn is not None and name != "control" else [])
        row = {"kernel": name, "bracket_us": statistics.median(brackets),
               "cupti_us": statistics.median(cupti) if cupti else None,
               "on_sm_us": statistics.median(on_sm) if on_sm else None, "cupti_records": len(cupti)}
        if row["cupti_us"] is not None:
            row["bracket_minus_cupti_us"] = row["bracket_us"] - row["cupti_us"]
            if row["on_sm_us"] is not None:
                row["cupti_minus_on_sm_us"] = row["cupti_us"] - row["on_sm_us"]
        print(json.dumps(row), flush=True)
        results.append(row)


main()
