"""tessera-node governing real GPU processes, side by side with `tessera run` (issue #22 part 2).

  node_governor.py BUILD NODE OUT

BUILD is the GPU host's build (the `gpu` preset: tessera, libtessera-cuda.so); NODE is the
folder test/gpu/carry_node.sh made (tessera-node and tessera-node-host with their libraries).
Every case runs the same workload twice in the same call: under `tessera run` (the path measured
so far) and as a pod whose slot tessera-node prepared from a signed decision through its device
plugin, started with the slot's Allocate answer and CDI spec in a cgroup named after the pod
(tessera-node-host: a kubelet stand-in and a fake API server around the real tessera-node).

  memory    torch-fill 256 MiB chunks under a 4 GiB cap: GiB allocated before OutOfMemoryError
  hard30    GEMM loop alone under a 30 % hard share: rate / native solo rate
  wc30      the same under 30 % work-conserving (borrows the idle GPU: ~1)
  pair      hard 30 % and work-conserving 30 % at once: each one's rate / solo
  priority  LC inference (priority_bench lc) at latency-critical beside a best-effort GEMM hog:
            LC p99 (ms) and the hog's rate / solo, time-sliced
  mps       the same with both in mode mps (spatial priority: the hog's SM limit)
  bypass    tessera-node only: a process of a governed pod started outside the library in the
            pod's cgroup: the TesseraComputeDrift Event and when it came
CASES (default all) picks some; SECONDS_PER_CASE (default 20) sets the workloads' length.
Prints a table; writes OUT/node_governor.json and each run's logs under OUT.
"""
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable
GEMM = [PY, os.path.join(HERE, "busy_shares.py"), "work", "gemm", "--seconds"]
FILL = [PY, os.path.join(HERE, "workloads.py"), "torch-fill", "256"]
LC = [PY, os.path.join(HERE, "priority_bench.py"), "lc", "resnet50", "--seconds"]
HOG = [PY, os.path.join(HERE, "priority_bench.py"), "be", "--shape", "gemm", "--seconds"]
SECONDS = float(os.environ.get("SECONDS_PER_CASE", "20"))
CASES = os.environ.get("CASES", "memory hard30 wc30 pair priority mps bypass").split()


def lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def rate(text, key="units"):
    """Units per second over the per-second lines, the first two and the last left out."""
    got = [l for l in lines(text) if key in l and "dt" in l][2:-1]
    return sum(l[key] for l in got) / sum(l["dt"] for l in got) if got else None


class Paths:
    def __init__(self, build, node, out):
        self.tessera = os.path.join(build, "cmd", "tessera", "tessera")
        self.hook = os.path.join(build, "src", "hook", "libtessera-cuda.so")
        self.node = node
        self.out = out
        self.runs = 0

    # ---- `tessera run` ----
    def start_run(self, args, cmd, name):
        log = open(os.path.join(self.out, f"run-{name}.log"), "w")
        return subprocess.Popen([self.tessera, "run"] + args + ["--"] + cmd, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL), log.name

    def run(self, specs):
        """specs: [(name, tessera run args, cmd)] at once; {name: output}."""
        started = [(n,) + self.start_run(a, c, n) for n, a, c in specs]
        for _, p, _ in started:
            p.wait(timeout=SECONDS * 4 + 120)
        return {n: open(log).read() for n, _, log in started}

    # ---- tessera-node ----
    def node_run(self, pods, name):
        self.runs += 1
        folder = os.path.join(self.out, f"node-{name}")
        scenario = os.path.join(self.out, f"node-{name}.json")
        with open(scenario, "w") as f:
            json.dump({"node": "gpu-host", "timeoutSeconds": SECONDS * 4 + 120, "pods": pods}, f)
        host = os.path.join(self.node, "tessera-node-host")
        got = subprocess.run([host, "run", "--self", host, "--scenario", scenario,
                              "--node-binary", os.path.join(self.node, "tessera-node"),
                              "--hook-library", self.hook, "--dir", folder, "--",
                              "--cleanup-interval-s", "1"],
                             capture_output=True, text=True, timeout=SECONDS * 4 + 300)
        if got.returncode != 0:
            raise RuntimeError(f"tessera-node-host: {got.stderr[-2000:]}")
        report = json.loads(got.stdout)
        with open(os.path.join(self.out, f"node-{name}.report.json"), "w") as f:
            json.dump(report, f, indent=1)
        outputs = {}
        for p in report["pods"]:
            for c in p["containers"]:
                if "error" in c:
                    raise RuntimeError(f"{p['pod']}/{c['name']}: {c['error']}")
                outputs[p["pod"].split("/")[1]] = open(c["log"]).read()
        return outputs, report


def pod(name, cmd, memory="24Gi", cores=0, compute="hard", priority="normal", mode="shared",
        start=0.0, extra=None):
    c = {"name": "main", "memory": memory, "cores": cores, "compute": compute, "mode": mode,
         "command": cmd}
    p = {"name": name, "namespace": "bench", "tier": "department", "priority": priority,
         "startAfterSeconds": start, "containers": [c] + (extra or [])}
    if mode == "mps":
        p["mpsUser"] = str(os.getuid())
    return p


def run_args(memory="24Gi", cores=0, compute="hard", priority="normal", mode="shared"):
    a = ["--gpu-memory", memory, "--priority", priority, "--mode", mode]
    if cores:
        a += ["--gpu-cores", str(cores), "--compute", compute]
    return a


def main():
    build, node, out = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    P = Paths(build, node, out)
    results = {"seconds_per_case": SECONDS}
    sec = str(SECONDS)

    def case(name, fn):
        if name not in CASES:
            return
        try:
            results[name] = fn()
        except Exception as e:  # a case's failure is reported, the others still run
            results[name] = {"error": str(e)}
        print(name, json.dumps(results[name]), flush=True)

    solo = subprocess.run(GEMM + [sec], capture_output=True, text=True).stdout
    results["gemm_solo_units_per_s"] = rate(solo)
    print("solo", results["gemm_solo_units_per_s"], flush=True)

    def memory():
        r = lines(P.run([("fill", run_args(memory="4Gi"), FILL)])["fill"])
        n, _ = P.node_run([pod("fill", FILL, memory="4Gi")], "memory")
        nl = lines(n["fill"])
        pick = lambda l: next((x.get("allocated") for x in l if "allocated" in x), None)
        return {"run_gib": (pick(r) or 0) / 2**30, "node_gib": (pick(nl) or 0) / 2**30}
    case("memory", memory)

    def alone(compute):
        def fn():
            r = rate(P.run([("g", run_args(cores=30, compute=compute), GEMM + [sec])])["g"])
            n, _ = P.node_run([pod("g", GEMM + [sec], cores=30, compute=compute)], "alone-" + compute)
            s = results["gemm_solo_units_per_s"]
            return {"run": r / s, "node": rate(n["g"]) / s}
        return fn
    case("hard30", alone("hard"))
    case("wc30", alone("work-conserving"))

    def pair():
        r = P.run([("hard", run_args(cores=30), GEMM + [sec]),
                   ("wc", run_args(cores=30, compute="work-conserving"), GEMM + [sec])])
        n, _ = P.node_run([pod("hard", GEMM + [sec], cores=30),
                           pod("wc", GEMM + [sec], cores=30, compute="work-conserving")], "pair")
        s = results["gemm_solo_units_per_s"]
        return {"run_hard": rate(r["hard"]) / s, "run_wc": rate(r["wc"]) / s,
                "node_hard": rate(n["hard"]) / s, "node_wc": rate(n["wc"]) / s}
    case("pair", pair)

    if not {"priority", "mps"} & set(CASES):
        CASES.append("skip-hog")
    hog_solo = None if "skip-hog" in CASES else rate(subprocess.run(HOG + [sec], capture_output=True, text=True).stdout, "steps")
    lc_solo = [] if "skip-hog" in CASES else lines(
        subprocess.run(LC + [str(SECONDS - 6)], capture_output=True, text=True).stdout)
    results["hog_solo_steps_per_s"] = hog_solo
    results["lc_solo"] = lc_solo[-1] if lc_solo else None

    def priority(mode):
        def fn():
            lc_cmd = ["sh", "-c", "sleep 4; exec " + " ".join(LC + [str(SECONDS - 6)])]
            r = P.run([("lc", run_args(memory="8Gi", priority="latency-critical", mode=mode), lc_cmd),
                       ("hog", run_args(memory="24Gi", priority="best-effort", mode=mode), HOG + [sec])])
            n, _ = P.node_run([pod("lc", lc_cmd, memory="8Gi", priority="latency-critical", mode=mode),
                               pod("hog", HOG + [sec], priority="best-effort", mode=mode)],
                              "priority-" + mode)
            rl, nl = lines(r["lc"]), lines(n["lc"])
            return {"run_lc_p99_ms": rl[-1]["p99_ms"] if rl else None,
                    "node_lc_p99_ms": nl[-1]["p99_ms"] if nl else None,
                    "run_hog": rate(r["hog"], "steps") / hog_solo,
                    "node_hog": rate(n["hog"], "steps") / hog_solo}
        return fn
    case("priority", priority("shared"))
    case("mps", priority("mps"))

    def bypass():
        sneak = {"name": "sneak", "outsideLibrary": True,
                 "command": ["sh", "-c", "sleep 8; exec " + " ".join(GEMM + [str(SECONDS)])]}
        n, report = P.node_run([pod("governed", GEMM + [str(SECONDS + 10)], cores=30, extra=[sneak])],
                               "bypass")
        events = [e for e in report["events"] if e.get("reason") == "TesseraComputeDrift"]
        return {"events": [e["message"] for e in events],
                "first_at": events[0].get("firstTimestamp") if events else None,
                "sneak_started_unix": next(c["startedAtUnix"] for c in report["pods"][0]["containers"]
                                           if c["name"] == "sneak") + 8}
    case("bypass", bypass)

    with open(os.path.join(out, "node_governor.json"), "w") as f:
        json.dump(results, f, indent=1)
    print("case | tessera run | tessera-node")
    for name in ("memory", "hard30", "wc30", "pair", "priority", "mps"):
        r = results.get(name, {})
        print(name, "|", json.dumps({k: v for k, v in r.items() if k.startswith("run")}), "|",
              json.dumps({k: v for k, v in r.items() if k.startswith("node")}))


if __name__ == "__main__":
    main()
