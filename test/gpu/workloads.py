"""Framework workloads for the GPU acceptance run (Python only drives the GPU here).

  torch-fill MIB    PyTorch's default caching allocator: torch.empty until OutOfMemoryError
  cupy-fill MIB     CuPy's default memory pool: cupy.empty until OutOfMemoryError
  training GIB      the seeds' showdown: try to take GIB GiB in 1 GiB tensors
  preprocessing     the seeds' showdown: 2 GiB of data, matrix products for a few seconds
"""
import json
import os
import sys
import time


def hold(report):
    report["pid"] = os.getpid()
    print(json.dumps(report), flush=True)
    print("HOLDING", flush=True)
    sys.stdin.read()


def torch_fill(mib):
    import torch
    chunks, allocated = [], 0
    try:
        while True:
            chunks.append(torch.empty(mib << 20, dtype=torch.uint8, device="cuda"))
            allocated += mib << 20
    except torch.OutOfMemoryError as e:
        error = type(e).__name__
    free, total = torch.cuda.mem_get_info()
    hold({"allocated": allocated, "error": error, "free": free, "total": total,
          "reserved": torch.cuda.memory_reserved()})


def cupy_fill(mib, pool="default"):
    import cupy
    if pool == "async":  # stream-ordered allocation (cudaMallocAsync pools)
        cupy.cuda.set_allocator(cupy.cuda.MemoryAsyncPool().malloc)
    chunks, allocated = [], 0
    try:
        while True:
            chunks.append(cupy.empty((mib << 20,), dtype=cupy.uint8))
            allocated += mib << 20
    except cupy.cuda.memory.OutOfMemoryError as e:
        error = type(e).__name__
    free, total = cupy.cuda.runtime.memGetInfo()
    hold({"allocated": allocated, "error": error, "free": free, "total": total,
          "pool_bytes": cupy.get_default_memory_pool().total_bytes()})


def torch_fill_all(mib):
    """Fill every visible GPU in turn until each refuses; report per device."""
    import torch
    chunks, report = [], {"devices": []}
    for d in range(torch.cuda.device_count()):
        allocated = 0
        try:
            while True:
                chunks.append(torch.empty(mib << 20, dtype=torch.uint8, device=f"cuda:{d}"))
                allocated += mib << 20
        except torch.OutOfMemoryError:
            pass
        free, total = torch.cuda.mem_get_info(d)
        report["devices"].append({"device": d, "allocated": allocated, "free": free, "total": total})
    hold(report)


def jax_fill(mib):
    """JAX: with XLA_PYTHON_CLIENT_PREALLOCATE=false it grows until refused; by default it
    preallocates 75 % of the memory the driver reports free (i.e. of the cap)."""
    import jax
    import jax.numpy as jnp
    chunks, allocated, error = [], 0, "none"
    try:
        while allocated < (64 << 30):
            chunks.append(jax.device_put(jnp.zeros((mib << 20,), dtype=jnp.uint8)))
            chunks[-1].block_until_ready()
            allocated += mib << 20
    except Exception as e:  # XlaRuntimeError: RESOURCE_EXHAUSTED
        error = type(e).__name__
    stats = jax.devices()[0].memory_stats() or {}
    hold({"allocated": allocated, "error": error, "bytes_limit": stats.get("bytes_limit"),
          "total": stats.get("bytes_limit"), "free": 0})


def hold_for(mib, seconds):
    """Allocate MIB with the runtime and keep it for SECONDS (several processes of one container)."""
    import torch
    try:
        x = torch.empty(mib << 20, dtype=torch.uint8, device="cuda")
        got = x.numel()
    except torch.OutOfMemoryError:
        got = 0
    print(json.dumps({"pid": os.getpid(), "got": got}), flush=True)
    time.sleep(seconds)


def training(gib):
    import torch
    held = []
    try:
        for i in range(gib):
            held.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
        print(json.dumps({"role": "training", "result": "took", "gib": len(held)}), flush=True)
        return 0
    except torch.OutOfMemoryError as e:
        print(json.dumps({"role": "training", "result": "oom", "gib": len(held),
                          "message": str(e).splitlines()[0][:160]}), flush=True)
        return 3


def preprocessing(seconds=6.0):
    import torch
    x = torch.randn(16384, 16384, device="cuda")  # 1 GiB
    y = torch.empty_like(x)                        # 1 GiB
    end, steps = time.time() + seconds, 0
    while time.time() < end:
        torch.matmul(x[:4096], x[:4096].T, out=y[:4096, :4096])
        torch.cuda.synchronize()
        steps += 1
    print(json.dumps({"role": "preprocessing", "result": "finished", "steps": steps}), flush=True)
    return 0


def nvml_view():
    """What NVML says about GPU 0 from inside the capped process (as nvidia-smi would)."""
    import pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    m = pynvml.nvmlDeviceGetMemoryInfo(h)
    print(json.dumps({"nvml_total": m.total, "nvml_used": m.used, "nvml_free": m.free}), flush=True)
    return 0


def dataloader():
    """PyTorch DataLoader workers fork while the main process holds CUDA memory."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")  # 1 GiB held by the parent
    data = TensorDataset(torch.arange(4096, dtype=torch.float32))
    total = 0.0
    for (batch,) in DataLoader(data, batch_size=64, num_workers=4):
        total += float(batch.sum())
    print(json.dumps({"role": "dataloader", "result": "finished", "sum": total,
                      "held": x.numel()}), flush=True)
    return 0


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "torch-fill":
        torch_fill(int(sys.argv[2]))
    elif mode == "cupy-fill":
        cupy_fill(int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "default")
    elif mode == "torch-fill-all":
        torch_fill_all(int(sys.argv[2]))
    elif mode == "jax-fill":
        jax_fill(int(sys.argv[2]))
    elif mode == "hold-for":
        hold_for(int(sys.argv[2]), float(sys.argv[3]))
    elif mode == "training":
        sys.exit(training(int(sys.argv[2])))
    elif mode == "preprocessing":
        sys.exit(preprocessing())
    elif mode == "nvml-view":
        sys.exit(nvml_view())
    elif mode == "dataloader":
        sys.exit(dataloader())
    else:
        sys.exit(2)
