"""The seeds' showdown on a real GPU (issue 11, the demo's enforcement half): four pods the demo
places on one 16 GiB GPU (inference-1 2000Mi, inference-2 2000Mi, training 8000Mi, preprocessing
3000Mi) run at once, natively and each under `tessera run --gpu-memory <its ask>`.

  showdown.py inference SECONDS      holds ~1 GiB and runs a matmul loop; prints its peak
  showdown.py training               grows weights then gradients 1 GiB at a time up to 12 GiB,
                                     as the seed's training job does ("Allocated 11GB for
                                     gradients"); exits 3 on CUDA out-of-memory
  showdown.py preprocessing SECONDS  holds ~1.5 GiB of buffers and transforms batches (PyTorch
                                     peaks at 1.94 GiB with the transform's temporaries, under
                                     its 3000Mi cap); exits 0, or 3 on CUDA out-of-memory
  showdown.py drive TESSERA OUT      runs the four natively, then under tessera; one JSON line per
                                     process to OUT/showdown.jsonl and a table on stdout

Each worker prints one JSON line: role, outcome (finished | oom), peak bytes reserved by PyTorch,
the bytes it had asked for when it stopped, seconds.
"""
import json
import os
import subprocess
import sys
import time

import torch

GiB = 1 << 30
SELF = [sys.executable, os.path.abspath(__file__)]
# The demo's showdown: role, its ask as the pod wrote it, what the worker does.
PODS = [("inference-1", "2000Mi", ["inference", "20"]),
        ("inference-2", "2000Mi", ["inference", "20"]),
        ("training", "8000Mi", ["training"]),
        ("preprocessing", "3000Mi", ["preprocessing", "15"])]


def report(role, outcome, asked, start):
    print(json.dumps({"role": role, "outcome": outcome, "asked_bytes": asked,
                      "peak_bytes": torch.cuda.max_memory_reserved(),
                      "seconds": round(time.time() - start, 2)}), flush=True)


def inference(seconds):
    start = time.time()
    w = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)  # 128 MiB
    x = torch.randn(64, 8192, device="cuda", dtype=torch.float16)
    pool = [torch.empty(GiB // 4, dtype=torch.uint8, device="cuda") for _ in range(3)]
    while time.time() - start < seconds:
        for _ in range(50):
            x = torch.tanh(x @ w)
        torch.cuda.synchronize()
    report("inference", "finished", sum(t.numel() for t in pool) + 2 * w.numel(), start)


def training():
    start = time.time()
    held = []
    asked = 0
    try:
        for step in range(12):  # 6 GiB of weights, then gradients, 1 GiB at a time
            held.append(torch.ones(GiB, dtype=torch.uint8, device="cuda"))
            asked += GiB
            torch.cuda.synchronize()
            time.sleep(0.5)
        time.sleep(5)
        report("training", "finished", asked, start)
    except torch.cuda.OutOfMemoryError:
        report("training", "oom", asked + GiB, start)
        sys.exit(3)


def preprocessing(seconds):
    start = time.time()
    # 1.5 GiB held: with the batch (147 MiB) and the transform's temporaries (std's among them)
    # PyTorch peaks at 1.94 GiB on an H200. With 2 GiB held it peaked at 2.44 GiB natively and,
    # under tessera, reached 2.80 GiB of the 2.93 GiB cap and was refused (uncaught: a crash).
    buffers = [torch.empty(GiB // 2, dtype=torch.uint8, device="cuda") for _ in range(3)]
    held = sum(t.numel() for t in buffers)
    try:
        batch = torch.randn(256, 3, 224, 224, device="cuda")
        while time.time() - start < seconds:
            batch = (batch - batch.mean()) / (batch.std() + 1e-6)
            torch.cuda.synchronize()
            time.sleep(0.05)
    except torch.cuda.OutOfMemoryError:
        report("preprocessing", "oom", held, start)
        sys.exit(3)
    report("preprocessing", "finished", held + batch.numel() * 4, start)


def round_of(tessera, tag):
    procs = []
    for role, ask, args in PODS:
        cmd = SELF + args
        if tessera:
            cmd = [tessera, "run", "--gpu-memory", ask, "--"] + cmd
        procs.append((role, ask, subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                                  stderr=subprocess.PIPE, text=True)))
    rows = []
    for role, ask, p in procs:
        out, err = p.communicate(timeout=300)
        line = next((l for l in out.splitlines() if l.startswith("{")), None)
        row = json.loads(line) if line else {"outcome": "crashed", "stderr": err[-400:]}
        row.update({"pod": role, "ask": ask, "exit": p.returncode, "run": tag})
        rows.append(row)
    return rows


def drive(tessera, out):
    os.makedirs(out, exist_ok=True)
    rows = round_of(None, "native") + round_of(tessera, "tessera")
    with open(os.path.join(out, "showdown.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    print(f"{'run':8} {'pod':14} {'ask':>8} {'peak GiB':>9} {'outcome':>9} {'exit':>5}")
    for r in rows:
        peak = r.get("peak_bytes", 0) / GiB
        print(f"{r['run']:8} {r['pod']:14} {r['ask']:>8} {peak:9.2f} {r['outcome']:>9} {r['exit']:>5}")
    for tag in ("native", "tessera"):
        total = sum(r.get("peak_bytes", 0) for r in rows if r["run"] == tag) / GiB
        print(f"{tag}: the four peak at {total:.2f} GiB together (the demo's GPU has 16 GiB)")


def main():
    role = sys.argv[1]
    if role == "inference":
        inference(float(sys.argv[2]))
    elif role == "training":
        training()
    elif role == "preprocessing":
        preprocessing(float(sys.argv[2]))
    elif role == "drive":
        drive(sys.argv[2], sys.argv[3])
    else:
        sys.exit("usage: showdown.py inference|training|preprocessing|drive ...")


if __name__ == "__main__":
    main()
