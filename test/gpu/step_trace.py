"""Per-step trace: physical usage (NVML, own pid) vs tessera's charge (total - free) vs torch's reserve,
after every 64 MiB allocation; run with and without `tessera run` and PYTORCH_CUDA_ALLOC_CONF."""
import ctypes, os, sys, json
import torch

class PI(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong),
                ("gi", ctypes.c_uint), ("ci", ctypes.c_uint)]

nv = ctypes.CDLL("libnvidia-ml.so.1")
nv.nvmlInit_v2()
h = ctypes.c_void_p()
nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))

def phys():
    n = ctypes.c_uint(64)
    arr = (PI * 64)()
    nv.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), arr)
    for i in range(n.value):
        if arr[i].pid == os.getpid():
            return arr[i].used
    return -1

MiB = 1 << 20
limit = int(sys.argv[1]) if len(sys.argv) > 1 else 10**9
chunks = []
torch.cuda.init()
x = torch.empty(1, device="cuda")
prev = phys()
print("start phys", prev / MiB, "reserved", torch.cuda.memory_reserved() / MiB, flush=True)
for k in range(limit):
    try:
        chunks.append(torch.empty(64 * MiB, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError as e:
        p = phys()
        free, total = torch.cuda.mem_get_info()
        print("OOM at", k, "phys", p / MiB, "charge", (total - free) / MiB, "reserved",
              torch.cuda.memory_reserved() / MiB, flush=True)
        break
    p = phys()
    free, total = torch.cuda.mem_get_info()
    if p - prev != 64 * MiB or k < 2 or k % 10 == 0:
        print(k, "phys", p / MiB, "d", (p - prev) / MiB, "charge", (total - free) / MiB,
              "reserved", torch.cuda.memory_reserved() / MiB, flush=True)
    prev = p
p = phys()
free, total = torch.cuda.mem_get_info()
print("end phys", p / MiB, "charge", (total - free) / MiB, "reserved", torch.cuda.memory_reserved() / MiB, flush=True)
torch.cuda.synchronize()
print("after sync phys", phys() / MiB, flush=True)
