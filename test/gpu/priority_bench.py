"""Priority under sharing (part c): a latency-critical (LC) PyTorch inference service beside a
best-effort (BE) training loop, natively and under tessera (time-sliced and MPS).

  priority_bench.py lc resnet50|transformer [--seconds S] [--interval-ms MS]
      batch-1 fp16 inference; each request runs the model and synchronizes. After 50 warm-up
      requests, requests arrive on a fixed schedule: every --interval-ms, or, when it is not
      given, every 1/LC_DUTY solo steps (the median of 100 unpaced requests; LC_DUTY defaults to
      0.25), so that the LC keeps the GPU about that busy alone. MODELS picks the models. Latency = completion - scheduled arrival (a late start counts).
      Prints one JSON line: p50/p99/mean latency, service time, busy fraction, window (Unix s).
  priority_bench.py be [--seconds S]
      bf16 MLP training (4 Linear 8192x8192, batch 4096, forward+backward+SGD); prints
      {"t","dt","steps","steps_per_s"} every second (steps counted when their event completes);
      stops on SIGTERM.
  priority_bench.py spatial BUILD OUT
      Spatial priority under MPS: LC_MODELS (default mlp resnet50 decode) beside BE_SHAPES
      (default gemm train graphs: full-GPU bf16 products of ~1.7 ms four to a step, the MLP
      training step, the products replayed from a CUDA graph), both under tessera --mode mps;
      LC p99 against the LC alone under tessera MPS, BE against its native solo rate. Writes
      OUT/spatial.json.
  priority_bench.py drive BUILD OUT
      BE solo once; per model: LC solo, then LC beside BE natively, under tessera time-sliced
      (--priority latency-critical / best-effort) and under tessera MPS (--mode mps). BE starts
      first and runs ~3 s before the LC starts; BE's rate is averaged over the LC's window.
      Prints a table per model and writes OUT/priority.json.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

import torch
from torch import nn

from jsonl import json_lines  # beside this script

SELF = [sys.executable, os.path.abspath(__file__)]
LC_SECONDS = float(os.environ.get("LC_SECONDS", "15"))


class Bottleneck(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.body = nn.Sequential(*conv_bn(cin, width, 1), nn.ReLU(inplace=True),
                                  *conv_bn(width, width, 3, stride), nn.ReLU(inplace=True),
                                  *conv_bn(width, cout, 1))
        self.skip = (nn.Sequential(*conv_bn(cin, cout, 1, stride))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


def conv_bn(cin, cout, k, stride=1):
    return [nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout)]


def resnet50():
    layers = [*conv_bn(3, 64, 7, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000)]
    model = nn.Sequential(*layers).to("cuda", torch.half, memory_format=torch.channels_last)
    x = torch.randn(1, 3, 224, 224, device="cuda", dtype=torch.half)
    return model.eval(), x.to(memory_format=torch.channels_last)


def transformer():
    layer = nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 6, enable_nested_tensor=False).to("cuda", torch.half)
    return model.eval(), torch.randn(1, 128, 512, device="cuda", dtype=torch.half)


def mlp():
    layers = []
    for _ in range(4):
        layers += [nn.Linear(2048, 2048), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(2048, 1000)).to("cuda", torch.half)
    return model.eval(), torch.randn(8, 2048, device="cuda", dtype=torch.half)


class DecodeStep(nn.Module):
    """One token of autoregressive decoding: 8 layers of d=1024 attending over a 2048-token
    KV cache (batch 1), as a serving engine's decode step runs them."""

    def __init__(self, d=1024, heads=16, layers=8, cache=2048):
        super().__init__()
        self.heads = heads
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(layers))
        self.out = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.ff = nn.ModuleList(nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
                                for _ in range(layers))
        self.k = torch.randn(layers, 1, heads, cache, d // heads)
        self.v = torch.randn(layers, 1, heads, cache, d // heads)

    def forward(self, x):
        b, d = x.shape[0], x.shape[-1]
        for i in range(len(self.qkv)):
            q, _, _ = self.qkv[i](x).split(d, dim=-1)
            q = q.view(b, self.heads, 1, d // self.heads)
            a = nn.functional.scaled_dot_product_attention(q, self.k[i], self.v[i])
            x = x + self.out[i](a.reshape(b, 1, d))
            x = x + self.ff[i](x)
        return x


def decode():
    model = DecodeStep().to("cuda", torch.half)
    model.k, model.v = model.k.to("cuda", torch.half), model.v.to("cuda", torch.half)
    return model.eval(), torch.randn(1, 1, 1024, device="cuda", dtype=torch.half)


LC_MODELS = {"mlp": mlp, "resnet50": resnet50, "transformer": transformer, "decode": decode}


def lc(model_name, seconds, interval_ms):
    model, x = LC_MODELS[model_name]()

    def request():
        model(x)
        torch.cuda.synchronize()

    with torch.inference_mode():
        for _ in range(50):
            request()
        report = {"model": model_name}
        if interval_ms is None:
            steps = []
            for _ in range(100):
                t = time.perf_counter()
                request()
                steps.append(time.perf_counter() - t)
            report["step_ms"] = statistics.median(steps) * 1e3
            interval_ms = report["step_ms"] / float(os.environ.get("LC_DUTY", "0.25"))
        interval = interval_ms / 1e3
        latency, service = [], []
        wall0, t0 = time.time(), time.perf_counter()
        while True:
            arrival = t0 + len(latency) * interval
            now = time.perf_counter()
            if arrival > t0 + seconds or now > t0 + seconds:
                break
            if now < arrival:
                time.sleep(arrival - now)
            begin = time.perf_counter()
            request()
            done = time.perf_counter()
            latency.append(done - arrival)
            service.append(done - begin)
        elapsed = time.perf_counter() - t0
    lat_q = statistics.quantiles(latency, n=100, method="inclusive")
    service_q = statistics.quantiles(service, n=100, method="inclusive")
    report.update(interval_ms=interval_ms, requests=len(latency), p50_ms=lat_q[49] * 1e3,
                  p99_ms=lat_q[98] * 1e3, mean_ms=statistics.fmean(latency) * 1e3,
                  service_p50_ms=service_q[49] * 1e3, service_p99_ms=service_q[98] * 1e3,
                  busy=sum(service) / elapsed, start=wall0, end=wall0 + elapsed)
    print(json.dumps(report))


def be_step(shape):
    """One best-effort step of the shape, queued (not synchronized)."""
    if shape == "train":
        layers = []
        for _ in range(4):
            layers += [nn.Linear(8192, 8192, bias=False), nn.ReLU()]
        model = nn.Sequential(*layers).to("cuda", torch.bfloat16)
        opt = torch.optim.SGD(model.parameters(), lr=1e-4)
        x = torch.randn(4096, 8192, device="cuda", dtype=torch.bfloat16)

        def step():
            model(x).float().square().mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return step
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 10240, device="cuda", dtype=torch.bfloat16)
    o = torch.empty(8192, 10240, device="cuda", dtype=torch.bfloat16)
    if shape == "gemm":  # full-GPU kernels of ~1.7 ms, four to a step
        def step():
            for _ in range(4):
                torch.mm(a, b, out=o)
        return step
    if shape == "graphs":  # the same products replayed from a CUDA graph
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            torch.mm(a, b, out=o)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(4):
                torch.mm(a, b, out=o)
        return g.replay
    raise SystemExit(f"unknown BE shape {shape}")


def be(seconds, shape="train"):
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    step = be_step(shape)
    pending, done, last_done = [], 0, 0
    last_t = time.time()
    end = last_t + seconds
    while not stop and time.time() < end:
        step()
        pending.append(torch.cuda.Event())
        pending[-1].record()
        if len(pending) > 2:  # two steps queued ahead; a step counts when its event completes
            pending.pop(0).synchronize()
            done += 1
        now = time.time()
        if now - last_t >= 1.0:
            print(json.dumps({"t": now, "dt": now - last_t, "steps": done - last_done,
                              "steps_per_s": (done - last_done) / (now - last_t)}), flush=True)
            last_t, last_done = now, done


def run_lc(prefix, model, interval_ms=None):
    cmd = prefix + SELF + ["lc", model, "--seconds", str(LC_SECONDS)]
    if interval_ms is not None:
        cmd += ["--interval-ms", f"{interval_ms:.4f}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # tessera run and the LC under it
        out, err = proc.communicate()
    found = [l for l in json_lines(out) if "p99_ms" in l]
    if proc.returncode != 0 or not found:
        return {"error": f"exit {proc.returncode}: {err.strip()[-400:]}"}
    return dict(found[-1], tessera=[l for l in err.splitlines() if l.startswith("tessera run")])


def start_be(prefix, log, shape="train"):
    """Starts BE with its stdout in `log`; returns once it reports steps (or has failed)."""
    with open(log, "w") as f, open(log + ".err", "w") as e:
        proc = subprocess.Popen(prefix + SELF + ["be", "--seconds", "600", "--shape", shape],
                                stdout=f, stderr=e, start_new_session=True)
    deadline = time.time() + 120
    while proc.poll() is None and time.time() < deadline and not be_lines(log):
        time.sleep(0.2)
    return proc


def stop_be(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def be_lines(log):
    with open(log) as f:
        return [l for l in json_lines(f.read()) if "steps" in l]


def be_rate(lines, start, end):
    """Steps per second over the BE lines whose second lies inside [start, end]."""
    inside = [l for l in lines if l["t"] - l["dt"] >= start and l["t"] <= end]
    return sum(l["steps"] for l in inside) / sum(l["dt"] for l in inside) if inside else None


def shared(out, tag, model, interval_ms, lc_prefix, be_prefix, shape="train"):
    log = os.path.join(out, f"be-{tag}.jsonl")
    proc = start_be(be_prefix, log, shape)
    try:
        time.sleep(2)
        res = run_lc(lc_prefix, model, interval_ms)
    finally:
        stop_be(proc)
    if "error" not in res:
        res["be_steps_per_s"] = be_rate(be_lines(log), res["start"], res["end"])
    return res


def fmt(x, spec=".2f"):
    return "-" if x is None else format(x, spec)


def table(model, rows, be_solo):
    solo = rows["LC solo"]
    print(f"\n{model}: solo step {fmt(solo.get('step_ms'))} ms, one request every "
          f"{fmt(solo.get('interval_ms'))} ms, solo busy {fmt(solo.get('busy'))}")
    print(f"{'scenario':20} {'LC p50':>8} {'LC p99':>8} {'p99/solo':>9} {'BE steps/s':>11} "
          f"{'BE/solo':>8}")
    for name, r in rows.items():
        if "error" in r:
            print(f"{name:20} error")
            continue
        both = "p99_ms" in r and "p99_ms" in solo
        r["p99_ratio"] = r["p99_ms"] / solo["p99_ms"] if both else None
        be_s = r.get("be_steps_per_s")
        r["be_ratio"] = be_s / be_solo if be_s is not None and be_solo else None
        be_cell = "error" if be_s is None and name != "LC solo" else fmt(be_s, ".1f")
        print(f"{name:20} {fmt(r.get('p50_ms')):>8} {fmt(r.get('p99_ms')):>8} "
              f"{fmt(r['p99_ratio']):>9} {be_cell:>11} {fmt(r['be_ratio']):>8}")

    def verdict(name, key, goal, better):
        v = rows[name].get(key)
        return "error" if v is None else f"{v:.2f} ({'met' if better(v, goal) else 'NOT met'})"

    lower, higher = (lambda v, g: v <= g), (lambda v, g: v >= g)
    print(f"goals: MPS p99 <= 1.3x solo: {verdict('tessera MPS', 'p99_ratio', 1.3, lower)}; "
          f"time-sliced p99 <= 2x solo: {verdict('tessera time-sliced', 'p99_ratio', 2, lower)}; "
          f"BE >= 0.5 of solo: time-sliced "
          f"{verdict('tessera time-sliced', 'be_ratio', 0.5, higher)}, "
          f"MPS {verdict('tessera MPS', 'be_ratio', 0.5, higher)}")


def drive(build, out):
    sys.stdout.reconfigure(line_buffering=True)
    run = [os.path.join(build, "cmd/tessera/tessera"), "run"]
    lc_t = run + ["--priority", "latency-critical", "--gpu-memory", "16Gi"]
    be_t = run + ["--priority", "best-effort", "--gpu-memory", "32Gi"]
    scenarios = (("native sharing", [], []),
                 ("tessera time-sliced", lc_t + ["--"], be_t + ["--"]),
                 ("tessera MPS", lc_t + ["--mode", "mps", "--"], be_t + ["--mode", "mps", "--"]))
    results = {"date": time.strftime("%Y-%m-%d %H:%M"), "models": {}}
    log = os.path.join(out, "be-solo.jsonl")
    proc = start_be([], log)
    time.sleep(13)
    stop_be(proc)
    lines = be_lines(log)
    be_solo = be_rate(lines, lines[0]["t"] + 2, float("inf")) if lines else None
    results["be_solo"] = {"steps_per_s": be_solo, "lines": lines}
    for model in os.environ.get("MODELS", "resnet50 transformer").split():
        rows = {"LC solo": run_lc([], model), "BE solo": {"be_steps_per_s": be_solo}}
        for i, (name, lc_prefix, be_prefix) in enumerate(scenarios):
            rows[name] = (shared(out, f"{model}-{i}", model, rows["LC solo"]["interval_ms"],
                                 lc_prefix, be_prefix)
                          if "error" not in rows["LC solo"] else {"error": "no LC solo"})
        table(model, rows, be_solo)
        results["models"][model] = rows
        with open(os.path.join(out, "priority.json"), "w") as f:
            json.dump(results, f, indent=1)


def be_solo_rate(out, shape, seconds=10):
    log = os.path.join(out, f"be-solo-{shape}.jsonl")
    proc = start_be([], log, shape)
    time.sleep(seconds)
    stop_be(proc)
    lines = be_lines(log)
    return be_rate(lines, lines[0]["t"] + 2, float("inf")) if len(lines) > 3 else None


def spatial(build, out):
    """Spatial priority under MPS: each LC model beside each BE shape, both under tessera MPS
    (LC latency-critical, BE best-effort: the BE's context leaves the LC reserve of SMs). LC p99
    against the LC alone under tessera MPS; BE rate against the BE alone, natively."""
    sys.stdout.reconfigure(line_buffering=True)
    run = [os.path.join(build, "cmd/tessera/tessera"), "run", "--mode", "mps"]
    lc_t = run + ["--priority", "latency-critical", "--gpu-memory", "16Gi", "--"]
    be_t = run + ["--priority", "best-effort", "--gpu-memory", "48Gi", "--"]
    results = {"date": time.strftime("%Y-%m-%d %H:%M"), "be_solo": {}, "lc_alone": {},
               "pairs": []}
    shapes = os.environ.get("BE_SHAPES", "gemm train graphs").split()
    models = os.environ.get("LC_MODELS", "mlp resnet50 decode").split()
    for shape in shapes:
        results["be_solo"][shape] = be_solo_rate(out, shape)
    for model in models:
        results["lc_alone"][model] = run_lc(lc_t, model)
    print(f"{'LC':10} {'BE':8} {'LC p99 alone':>13} {'LC p99':>8} {'ratio':>6} {'BE/solo':>8} "
          f"{'goal':>5}")
    for model in models:
        alone = results["lc_alone"][model]
        if "error" in alone:
            print(f"{model:10} error: {alone['error']}")
            continue
        for shape in shapes:
            r = shared(out, f"spatial-{model}-{shape}", model, alone["interval_ms"], lc_t, be_t,
                       shape)
            solo = results["be_solo"][shape]
            row = {"lc": model, "be": shape, **r}
            if "error" not in r:
                row["p99_ratio"] = r["p99_ms"] / alone["p99_ms"]
                be_s = r.get("be_steps_per_s")
                row["be_ratio"] = be_s / solo if be_s and solo else None
                met = row["p99_ratio"] <= 1.3 and (row["be_ratio"] or 0) >= 0.8
                print(f"{model:10} {shape:8} {alone['p99_ms']:13.3f} {r['p99_ms']:8.3f} "
                      f"{row['p99_ratio']:6.2f} {fmt(row['be_ratio']):>8} "
                      f"{'met' if met else 'NOT':>5}")
            else:
                print(f"{model:10} {shape:8} error: {r['error'][-200:]}")
            results["pairs"].append(row)
            with open(os.path.join(out, "spatial.json"), "w") as f:
                json.dump(results, f, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    p_lc = sub.add_parser("lc")
    p_lc.add_argument("model", choices=tuple(LC_MODELS))
    p_lc.add_argument("--seconds", type=float, default=LC_SECONDS)
    p_lc.add_argument("--interval-ms", type=float)
    p_be = sub.add_parser("be")
    p_be.add_argument("--seconds", type=float, default=60)
    p_be.add_argument("--shape", choices=("train", "gemm", "graphs"), default="train")
    for name in ("drive", "spatial"):
        p_drive = sub.add_parser(name)
        p_drive.add_argument("build")
        p_drive.add_argument("out")
    a = p.parse_args()
    if a.cmd == "lc":
        lc(a.model, a.seconds, a.interval_ms)
    elif a.cmd == "be":
        be(a.seconds, a.shape)
    elif a.cmd == "spatial":
        spatial(a.build, a.out)
    else:
        drive(a.build, a.out)


main()
