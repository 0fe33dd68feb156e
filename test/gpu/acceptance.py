"""GPU acceptance and overhead run for libtessera-cuda (part 1). Run by run_gpu_tests.sh on the
GPU host; prints a table and writes results.json.

Memory caps: each workload runs under `tessera run --gpu-memory 4Gi`, fills memory until
refused, then holds it while NVML (outside the cap) reports the process's physical usage.
Showdown: the seeds' training (8 GiB cap, tries 11 GiB) and preprocessing (3 GiB cap) together.
Overhead: interleaved A/B runs against native in the same run, >= 20 repeats, median of the
paired differences with a bootstrap 95% confidence interval.
"""
import json
import os
import random
import statistics
import subprocess
import sys
import time

import pynvml

BUILD = sys.argv[1]
OUT = sys.argv[2]
TESSERA = os.path.join(BUILD, "cmd/tessera/tessera")
HOOK = os.path.join(BUILD, "src/hook/libtessera-cuda.so")
HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.join(OUT, "bin")
GIB = 1 << 30
REPEATS = int(os.environ.get("REPEATS", "30"))
PIN = {int(os.environ.get("PIN_CPU", "3"))}  # one core for every timed process: less noise

pynvml.nvmlInit()
GPU = pynvml.nvmlDeviceGetHandleByIndex(0)
results = {"driver": pynvml.nvmlSystemGetDriverVersion(), "gpu": pynvml.nvmlDeviceGetName(GPU),
           "kernel": os.uname().release, "date": time.strftime("%Y-%m-%d"), "caps": [], "bench": {}}


def physical_bytes(pid):
    for p in pynvml.nvmlDeviceGetComputeRunningProcesses(GPU):
        if p.pid == pid:
            return p.usedGpuMemory
    return None


def capped(cmd, cap="4Gi", extra=()):
    return [TESSERA, "run", "--gpu-memory", cap, *extra, "--"] + cmd


def fill(name, cmd):
    proc = subprocess.Popen(capped(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    report = None
    for line in proc.stdout:
        line = line.strip()
        if line.startswith("{"):
            report = json.loads(line)
        if line == "HOLDING":
            break
    phys = physical_bytes(report["pid"]) if report and "pid" in report else None
    proc.stdin.close()
    proc.stdout.read()
    err = proc.stderr.read()
    proc.wait(timeout=120)
    row = {"workload": name, "report": report, "physical": phys,
           "tessera": [l for l in err.splitlines() if l.startswith("tessera")][-4:]}
    results["caps"].append(row)
    return row


def summarize(native, hooked):
    """Medians, the median of the paired differences (tessera - native) and its bootstrap 95% CI."""
    diffs = [h - n for n, h in zip(native, hooked)]
    boot = sorted(statistics.median(random.choices(diffs, k=len(diffs))) for _ in range(2000))
    return {"native_median": statistics.median(native), "tessera_median": statistics.median(hooked),
            "diff_median": statistics.median(diffs), "ci95": [boot[50], boot[1949]],
            "repeats": len(diffs)}


def paired(name, native_cmd, tessera_cmd, key, env=None):
    """Interleaved A/B: returns median native, median tessera, median paired diff, CI."""
    native, hooked = [], []
    for i in range(REPEATS):
        order = [(native, native_cmd), (hooked, tessera_cmd)]
        if i % 2:
            order.reverse()
        for sink, cmd in order:
            t0 = time.perf_counter()
            out = subprocess.run(cmd, capture_output=True, text=True, env=env,
                                 preexec_fn=lambda: os.sched_setaffinity(0, PIN))
            wall = (time.perf_counter() - t0) * 1e3
            value = wall
            for line in out.stdout.splitlines():
                if line.startswith("{"):
                    d = json.loads(line)
                    if key in d:
                        value = d[key]
            sink.append(value)
    res = dict(summarize(native, hooked), native=native, tessera=hooked)
    results["bench"][name] = res
    return res


def capped_group(n, cap, cmd, settle_s):
    """n processes of one container (one `tessera run`, one region) each running cmd; returns
    the container's peak physical usage (NVML, outside the cap) and what each process got."""
    script = " & ".join([" ".join(cmd)] * n) + " & wait"
    proc = subprocess.Popen(capped(["sh", "-c", script], cap=cap), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    peak, end = 0, time.time() + settle_s
    while time.time() < end:
        used = sum(p.usedGpuMemory or 0 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(GPU))
        peak = max(peak, used)
        time.sleep(0.05)
    out, err = proc.communicate(timeout=600)
    got = [json.loads(l)["got"] for l in out.splitlines() if l.startswith("{")]
    return {"processes": n, "cap": cap, "peak_physical": peak, "granted": got,
            "tessera": [l for l in err.splitlines() if l.startswith("tessera run")][-1:]}


def pod_environments(cap):
    """(tessera, native) environments for a process as it runs in a pod: the preload with a limits
    file and region kept by `tessera run --keep` (cap `cap`), and the same GPU without it."""
    keep = subprocess.run([TESSERA, "run", "--gpu-memory", cap, "--keep", "--", "true"],
                          capture_output=True, text=True).stderr
    kept = [l.split("kept ")[1] for l in keep.splitlines() if "kept " in l][0]
    uuid = pynvml.nvmlDeviceGetUUID(GPU)
    hooked = dict(os.environ, LD_PRELOAD=HOOK, TESSERA_LIMITS_FILE=f"{kept}/limits",
                  TESSERA_REGION_FILE=f"{kept}/region", CUDA_VISIBLE_DEVICES=uuid)
    return hooked, dict(os.environ, CUDA_VISIBLE_DEVICES=uuid)


def startup_at_scale(n, repeats=3):
    """Wall time for n processes of one container to start, create a context and allocate 1 MiB,
    native vs under tessera (same limits file and region for all n)."""
    env_t, env_n = pod_environments("100Gi")
    rows = {"native": [], "tessera": []}
    for i in range(repeats):
        for name in (("native", "tessera") if i % 2 == 0 else ("tessera", "native")):
            env = env_n if name == "native" else env_t
            t0 = time.perf_counter()
            procs = [subprocess.Popen([f"{BIN}/driver_probe", "first-call"], stdout=subprocess.DEVNULL,
                                      env=env) for _ in range(n)]
            for p in procs:
                p.wait()
            rows[name].append(time.perf_counter() - t0)
    n_med, t_med = statistics.median(rows["native"]), statistics.median(rows["tessera"])
    return {"processes": n, "native_s": rows["native"], "tessera_s": rows["tessera"],
            "ratio_of_medians": t_med / n_med}


def arrays_and_graphs():
    subprocess.run(["nvcc", "-O2", "-std=c++17", "-arch=sm_90", "-o", f"{BIN}/part2_probe",
                    f"{HERE}/part2_probe.cu"], check=True)
    fill("CUDA arrays (cudaMallocArray, 256 MiB each)", [f"{BIN}/part2_probe", "arrays", "256"])
    fill("CUDA graphs with memory nodes (1 GiB each)", [f"{BIN}/part2_probe", "graphs", "1024"])


def part2(py):
    """libtessera-cuda part 2 on the real GPU: pools, VMM, JAX, several processes, start-up."""
    env_async = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="backend:cudaMallocAsync")
    env_expand = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    env_jax_lazy = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    if os.environ.get("ONLY_NEW"):
        arrays_and_graphs()
        return
    for name, cmd, env in (
            ("PyTorch expandable segments (VMM: cuMemCreate)", py + ["torch-fill", "64"], env_expand),
            ("PyTorch cudaMallocAsync backend (pools)", py + ["torch-fill", "64"], env_async),
            ("CuPy MemoryAsyncPool (pools)", py + ["cupy-fill", "64", "async"], None),
            ("JAX, preallocation off", py + ["jax-fill", "64"], env_jax_lazy),
            ("JAX, preallocation on (default)", py + ["jax-fill", "64"], None)):
        saved = dict(os.environ)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        try:
            fill(name, cmd)
        finally:
            os.environ.clear()
            os.environ.update(saved)
    arrays_and_graphs()
    results["groups"] = [
        capped_group(4, "4Gi", py + ["hold-for", "1536", "6"], 8.0),
        capped_group(16, "16Gi", py + ["hold-for", "1536", "8"], 10.0),
    ]
    if not os.environ.get("SKIP_STARTUP"):  # the slow part (~2 min): 64 processes x 3 x 2
        results["startup"] = startup_at_scale(64)


def multigpu(py):
    """Two GPUs under one `tessera run --gpu 0,1`: each capped separately; and a statically
    linked CUDA runtime (it still reaches the driver through dlopen + cuGetProcAddress)."""
    count = pynvml.nvmlDeviceGetCount()
    if count >= 2:
        proc = subprocess.Popen(capped(py + ["torch-fill-all", "64"], extra=("--gpu", "0,1")),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        report = None
        for line in proc.stdout:
            if line.startswith("{"):
                report = json.loads(line)
            if line.strip() == "HOLDING":
                break
        phys = []
        for i in range(2):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            phys.append(sum(p.usedGpuMemory or 0 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)
                            if report and p.pid == report["pid"]))
        proc.stdin.close()
        proc.stdout.read()
        err = proc.stderr.read()
        proc.wait(timeout=120)
        results["multigpu"] = {"report": report, "physical_per_gpu": phys,
                               "tessera": [l for l in err.splitlines() if l.startswith("tessera run")]}
    subprocess.run(["nvcc", "-O2", "-std=c++17", "-arch=sm_90", "-cudart", "static", "-o",
                    f"{BIN}/runtime_probe_static", f"{HERE}/runtime_probe.cu", "-lcuda"], check=True)
    fill("CUDA runtime linked statically (cudaMalloc)", [f"{BIN}/runtime_probe_static", "fill", "64"])


def first_call_bench():
    """Process start and first CUDA call, native vs the preload with limits and region in place
    (as in a pod, no `tessera run`): REPEATS interleaved pairs, each process pinned."""
    env, native_env = pod_environments("8Gi")
    native, hooked = [], []
    for i in range(REPEATS):
        for which in ([0, 1] if i % 2 == 0 else [1, 0]):
            t0 = time.perf_counter()
            out = subprocess.run([f"{BIN}/driver_probe", "first-call"], capture_output=True, text=True,
                                 env=env if which else native_env,
                                 preexec_fn=lambda: os.sched_setaffinity(0, PIN))
            wall = (time.perf_counter() - t0) * 1e3
            inner = json.loads(out.stdout.strip().splitlines()[-1]).get("first_call_ms", -1)
            (hooked if which else native).append((wall, inner))
    for idx, name in ((0, "process_wall_ms"), (1, "first_call_ms")):
        results["bench"][name] = summarize([x[idx] for x in native], [x[idx] for x in hooked])

    stats = subprocess.run([f"{BIN}/driver_probe", "first-call"], capture_output=True, text=True,
                           env=dict(env, TESSERA_HOOK_STATS="1"))
    results["first_call_hook_stats"] = [l for l in stats.stderr.splitlines() if "stats:" in l]


def print_bench():
    print("\n| metric | native median | tessera median | median paired diff | 95% CI | repeats |")
    print("|---|---|---|---|---|---|")
    for name, b in results["bench"].items():
        print(f"| {name} | {b['native_median']:.2f} | {b['tessera_median']:.2f} | {b['diff_median']:+.2f} "
              f"| [{b['ci95'][0]:+.2f}, {b['ci95'][1]:+.2f}] | {b['repeats']} |")


def main():
    nvcc = ["nvcc", "-O2", "-std=c++17", "-arch=sm_90"]
    os.makedirs(BIN, exist_ok=True)
    subprocess.run(nvcc + ["-o", f"{BIN}/driver_probe", f"{HERE}/driver_probe.cc", "-lcuda"], check=True)
    subprocess.run(nvcc + ["-o", f"{BIN}/runtime_probe", f"{HERE}/runtime_probe.cu", "-lcuda"], check=True)
    py = [sys.executable, f"{HERE}/workloads.py"]
    if os.environ.get("SUITE") == "multigpu":
        multigpu(py)
        with open(os.path.join(OUT, "results.json"), "w") as f:
            json.dump(results, f, indent=1)
        print(json.dumps({k: results.get(k) for k in ("gpu", "driver", "multigpu", "caps")}, indent=1))
        return
    if os.environ.get("SUITE") == "first-call":  # only the start-up A/B (a quick re-check)
        first_call_bench()
        with open(os.path.join(OUT, "results.json"), "w") as f:
            json.dump(results, f, indent=1)
        print(f"\n{results['gpu']} driver {results['driver']} kernel {results['kernel']} {results['date']}")
        print("\nfirst call, hook's own times:", *results["first_call_hook_stats"], sep="\n  ")
        print_bench()
        return
    if os.environ.get("SUITE") == "part2":
        part2(py)
        with open(os.path.join(OUT, "results.json"), "w") as f:
            json.dump(results, f, indent=1)
        print(f"\n{results['gpu']} driver {results['driver']} kernel {results['kernel']} {results['date']}")
        print("\n| workload (cap 4 GiB) | app got | error | reported total | NVML physical |")
        print("|---|---|---|---|---|")
        for row in results["caps"]:
            r = row["report"] or {}
            phys = row["physical"]
            total = r.get("total") or 0
            print(f"| {row['workload']} | {r.get('allocated', 0) / GIB:.2f} GiB | {r.get('error', r.get('last_error'))} "
                  f"| {total / GIB:.2f} GiB | {'?' if phys is None else f'{phys / GIB:.2f} GiB'} |")
        print(json.dumps({"groups": results.get("groups"), "startup": results.get("startup"),
                          "caps": results["caps"]}, indent=1))
        return

    # 1. Caps: 4 GiB, each path.
    fill("driver API (cuMemAlloc)", [f"{BIN}/driver_probe", "fill", "64"])
    fill("CUDA runtime (cudaMalloc)", [f"{BIN}/runtime_probe", "fill", "64"])
    fill("PyTorch default allocator", py + ["torch-fill", "64"])
    fill("CuPy default pool", py + ["cupy-fill", "64"])

    # 2. Showdown.
    pre = subprocess.Popen(capped(py + ["preprocessing"], cap="3Gi"), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    train = subprocess.run(capped(py + ["training", "11"], cap="8Gi"), capture_output=True, text=True)
    pre_out, pre_err = pre.communicate(timeout=120)
    results["showdown"] = {"training_exit": train.returncode, "training": train.stdout.strip(),
                           "training_log": train.stderr.strip().splitlines()[-3:],
                           "preprocessing_exit": pre.returncode, "preprocessing": pre_out.strip()}

    # 2b. NVML inside the cap (pynvml and nvidia-smi), and forked DataLoader workers.
    view = subprocess.run(capped(py + ["nvml-view"]), capture_output=True, text=True)
    smi = subprocess.run(capped(["nvidia-smi", "--query-gpu=memory.total,memory.used",
                                 "--format=csv,noheader"]), capture_output=True, text=True)
    loader = subprocess.run(capped(py + ["dataloader"]), capture_output=True, text=True, timeout=300)
    results["nvml"] = {"pynvml": view.stdout.strip(), "nvidia_smi": smi.stdout.strip(),
                       "dataloader_exit": loader.returncode, "dataloader": loader.stdout.strip()[-200:]}
    if os.environ.get("SKIP_BENCH"):
        with open(os.path.join(OUT, "results.json"), "w") as f:
            json.dump(results, f, indent=1)
        print(json.dumps({k: results[k] for k in ("caps", "showdown", "nvml")}, indent=1))
        return

    # 3. Overhead, interleaved A/B against native.
    paired("launch_runtime_ns", [f"{BIN}/runtime_probe", "launch", "100000"],
           capped([f"{BIN}/runtime_probe", "launch", "100000"], cap="8Gi"), "launch_ns")
    paired("launch_driver_ns", [f"{BIN}/runtime_probe", "launch-driver", "100000"],
           capped([f"{BIN}/runtime_probe", "launch-driver", "100000"], cap="8Gi"), "launch_ns")
    # Which entry points the runtime really reaches through the hooks (TESSERA_HOOK_STATS).
    stats = subprocess.run(capped([f"{BIN}/runtime_probe", "launch", "1000"], cap="8Gi"),
                           capture_output=True, text=True, env=dict(os.environ, TESSERA_HOOK_STATS="1"))
    results["runtime_hook_stats"] = [l for l in stats.stderr.splitlines() if "stats:" in l]
    paired("cuMemAlloc_4KiB_p50_ns", [f"{BIN}/driver_probe", "alloc-bench", "2000", "4096"],
           capped([f"{BIN}/driver_probe", "alloc-bench", "2000", "4096"], cap="8Gi"), "alloc_p50_ns")
    paired("cuMemAlloc_64MiB_p50_ns", [f"{BIN}/driver_probe", "alloc-bench", "300", str(64 << 20)],
           capped([f"{BIN}/driver_probe", "alloc-bench", "300", str(64 << 20)], cap="8Gi"), "alloc_p50_ns")
    first_call_bench()

    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(results, f, indent=1)

    print(f"\n{results['gpu']} driver {results['driver']} kernel {results['kernel']} {results['date']}")
    print("\n| workload (cap 4 GiB) | app got | error | reported total | reported free | NVML physical |")
    print("|---|---|---|---|---|---|")
    for row in results["caps"]:
        r = row["report"] or {}
        phys = row["physical"]
        print(f"| {row['workload']} | {r.get('allocated', 0) / GIB:.2f} GiB | {r.get('last_error', r.get('error'))} "
              f"| {r.get('total', 0) / GIB:.2f} GiB | {r.get('free', 0) / GIB:.3f} GiB "
              f"| {'?' if phys is None else f'{phys / GIB:.2f} GiB'} |")
    for row in results["caps"]:
        print(row["workload"], row["tessera"])
    print("\nshowdown:", json.dumps(results["showdown"], indent=1))
    print("\nNVML inside the cap:", json.dumps(results["nvml"], indent=1))
    print("\nruntime launch path through the hooks:", *results["runtime_hook_stats"], sep="\n  ")
    print("\nfirst call, hook's own times:", *results["first_call_hook_stats"], sep="\n  ")
    print_bench()


main()
