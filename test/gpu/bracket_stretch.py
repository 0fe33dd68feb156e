"""What another context puts inside a probe's bracket (ADR 0017, busy-time accounting).

Two processes of one container run time-sliced contexts: on the H200 their probes of a 0.85 us
kernel averaged 7 us (benchmarks.md, tenth version). This script measures where that time lies,
in a launch-bound CuPy loop of one-block kernels that, every 32nd launch, takes a probe as the
preload library does (the stream held at a gate, a start event, the launch, an end event) with a
second event right after the start, so that the bracket splits into its empty part (start to
second event) and its kernel part; the kernel records its own time on the SMs (%globaltimer).
Every 20 ms, with its own work drained, it also times an empty gated bracket on a second stream
(what the watcher of the preload library times for the probe offset). All of it beside a
neighbour process started first: none, the same loop (without or with its own gated probes),
PyTorch's launch-bound loop, or a GEMM hog.

  bracket_stretch.py [--neighbour none|self|selfprobe|launchbound|gemm] [--seconds S]   one JSON line
  bracket_stretch.py loop --seconds S                                         the neighbour loop
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

import cupy as cp

from timed_kernels import SOURCE  # beside this script

HERE = os.path.dirname(os.path.abspath(__file__))


def summary(values):
    if not values:
        return None
    v = sorted(values)
    return {"n": len(v), "mean": round(statistics.fmean(v), 3), "p10": round(v[len(v) // 10], 3),
            "p50": round(v[len(v) // 2], 3), "p90": round(v[len(v) * 9 // 10], 3),
            "p99": round(v[len(v) * 99 // 100], 3), "max": round(v[-1], 3),
            "over_32us": sum(1 for t in v if t >= 32.0)}


def loop(seconds):
    module = cp.RawModule(code=SOURCE)
    scale = module.get_function("scale")
    x = cp.ones(4096, dtype=cp.float32)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(256):
            scale((16,), (256,), (x, cp.int32(4096), cp.uint64(0)))
        cp.cuda.Device().synchronize()


def measure(seconds):
    module = cp.RawModule(code=SOURCE)
    scale = module.get_function("scale")
    cuda = ctypes.CDLL("libcuda.so.1")
    cp.cuda.Device().synchronize()
    word_ptr = ctypes.c_void_p()
    assert cuda.cuMemHostAlloc(ctypes.byref(word_ptr), ctypes.c_size_t(64), 0x1 | 0x2) == 0
    word = ctypes.c_uint32.from_address(word_ptr.value)
    word.value = 0
    word_dev = ctypes.c_uint64()
    assert cuda.cuMemHostGetDevicePointer_v2(ctypes.byref(word_dev), word_ptr, 0) == 0
    stream = cp.cuda.Stream(non_blocking=True)
    side = cp.cuda.Stream(non_blocking=True)
    x = cp.ones(4096, dtype=cp.float32)
    spans = cp.zeros(2 * 8192, dtype=cp.uint64)
    spans[0::2] = cp.uint64(2**64 - 1)  # (scale takes the least start and the latest end)
    seq = [0]
    rows = {"probe": [], "probe_empty_part": [], "probe_kernel_part": [], "on_sm": [],
            "idle_empty": [], "outlier_empty_part": [], "outlier_kernel_part": []}
    pending = []  # (e0, e1, e2, index)

    def hold(s):
        seq[0] += 1
        assert cuda.cuStreamWaitValue32_v2(ctypes.c_void_p(s.ptr), word_dev,
                                           ctypes.c_uint32(seq[0]), 0) == 0

    def release():
        word.value = seq[0]

    probes = 0
    last_idle = time.perf_counter()
    end = time.perf_counter() + seconds
    with stream:
        while time.perf_counter() < end and probes < 8192:
            for i in range(256):
                if i % 32 == 31 and probes < 8192:
                    e0, e1, e2 = cp.cuda.Event(), cp.cuda.Event(), cp.cuda.Event()
                    hold(stream)
                    e0.record(stream)
                    e1.record(stream)
                    scale((16,), (256,), (x, cp.int32(4096), spans[2 * probes:]))
                    e2.record(stream)
                    release()
                    pending.append((e0, e1, e2, probes))
                    probes += 1
                else:
                    scale((16,), (256,), (x, cp.int32(4096), cp.uint64(0)))
            stream.synchronize()
            for e0, e1, e2, k in pending:
                a = cp.cuda.get_elapsed_time(e0, e1) * 1000.0
                b = cp.cuda.get_elapsed_time(e1, e2) * 1000.0
                rows["probe"].append(a + b)
                rows["probe_empty_part"].append(a)
                rows["probe_kernel_part"].append(b)
                if a + b >= 32.0:  # where an outlier's time lies
                    rows["outlier_empty_part"].append(a)
                    rows["outlier_kernel_part"].append(b)
            pending.clear()
            if time.perf_counter() - last_idle > 0.02:
                last_idle = time.perf_counter()
                f0, f1 = cp.cuda.Event(), cp.cuda.Event()
                hold(side)
                f0.record(side)
                f1.record(side)
                release()
                f1.synchronize()
                rows["idle_empty"].append(cp.cuda.get_elapsed_time(f0, f1) * 1000.0)
    host = spans.get()
    rows["on_sm"] = [(int(host[2 * k + 1]) - int(host[2 * k])) / 1000.0 for k in range(probes)]
    return {name: summary(v) for name, v in rows.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", nargs="?", default="measure", choices=("measure", "loop"))
    p.add_argument("--neighbour", default="none",
                   choices=("none", "self", "selfprobe", "launchbound", "gemm"))
    p.add_argument("--seconds", type=float, default=5.0)
    a = p.parse_args()
    if a.mode == "loop":
        loop(a.seconds)
        return
    child = None
    if a.neighbour == "self":
        child = [sys.executable, os.path.abspath(__file__), "loop", "--seconds", str(a.seconds + 4)]
    elif a.neighbour == "selfprobe":  # the same loop, taking gated probes too
        child = [sys.executable, os.path.abspath(__file__), "--seconds", str(a.seconds + 4)]
    elif a.neighbour in ("launchbound", "gemm"):
        child = [sys.executable, os.path.join(HERE, "busy_shares.py"), "work", a.neighbour,
                 "--seconds", str(a.seconds + 4)]
    proc = subprocess.Popen(child, stdout=subprocess.DEVNULL) if child else None
    if proc:
        time.sleep(3)  # its context made and its loop running
    row = {"neighbour": a.neighbour, **measure(a.seconds)}
    if proc:
        proc.terminate()
        proc.wait()
    print(json.dumps(row), flush=True)


main()
