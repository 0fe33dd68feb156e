"""tessera-node governing real GPU processes, side by side with `tessera run` (issue #22 part 2).

  node_governor.py BUILD NODE OUT

On the device tool: here, build the dev preset's tessera-node and tessera-node-host and run
test/gpu/carry_node.sh (it fills .devrun/node); then one call, carrying .devrun/node and
third_party/cuda: `cmake --preset gpu && cmake --build build/gpu --target tessera tessera_hook &&
CASES="memory hard30 wc30 pair" python3 test/gpu/node_governor.py build/gpu .devrun/node $OUT`, and
a second call with CASES="priority mps bypass" (all cases take ~9 min at the default length, more
than one call's 10 minutes with the build).

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
CASES (default all) picks some; SECONDS_PER_CASE (default 20) sets the workloads' length;
DEADLINE_S (default 540) skips the cases that would start after it (the device tool's call lasts at
most 600 s: run the rest in a second call with CASES). A preflight pod (`true`) first checks that
the node path works at all (cgroups, mount namespace, tessera-node's start).
Prints a table; writes OUT/node_governor.json after every case and OUT/logs.tgz at the end (the
runs' folders live under /tmp/tnh-*: sockets and MPS pipes need short paths, and the device tool
brings few files back).
"""
import datetime
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable
GEMM = [PY, os.path.join(HERE, "busy_shares.py"), "work", "gemm", "--seconds"]
FILL = [PY, os.path.join(HERE, "workloads.py"), "torch-fill", "256"]
LC = [PY, os.path.join(HERE, "priority_bench.py"), "lc", "resnet50", "--seconds"]
HOG = [PY, os.path.join(HERE, "priority_bench.py"), "be", "--shape", "gemm", "--seconds"]
SECONDS = float(os.environ.get("SECONDS_PER_CASE", "20"))
DEADLINE = time.time() + float(os.environ.get("DEADLINE_S", "540"))
STEP_TIMEOUT = SECONDS * 2 + 60
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


def rate(text, key="units", what="workload"):
    """Units per second over the per-second lines, the first two and the last left out."""
    got = [l for l in lines(text) if key in l and "dt" in l][2:-1]
    if not got:
        raise RuntimeError(f"{what}: no per-second '{key}' lines; its output ends:\n{text[-1500:]}")
    return sum(l[key] for l in got) / sum(l["dt"] for l in got)


def field(text, key, what="workload"):
    """The value of `key` in the last JSON line that has it."""
    got = [l[key] for l in lines(text) if key in l]
    if not got:
        raise RuntimeError(f"{what}: no '{key}' in its output, which ends:\n{text[-1500:]}")
    return got[-1]


def quiet(cmd):
    """A solo run (no tessera), bounded."""
    return subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=STEP_TIMEOUT).stdout


class Paths:
    def __init__(self, build, node, out):
        self.tessera = os.path.join(build, "cmd", "tessera", "tessera")
        self.hook = os.path.join(build, "src", "hook", "libtessera-cuda.so")
        self.node = node
        self.out = out
        self.work = tempfile.mkdtemp(prefix="/tmp/tnh-")

    # ---- `tessera run` ----
    def run(self, specs):
        """specs: [(name, tessera run args, cmd)] at once; {name: output}. Each run leads its own
        session, killed whole when it overstays."""
        started = []
        for name, args, cmd in specs:
            log = os.path.join(self.work, f"run-{name}.log")
            with open(log, "w") as f:
                p = subprocess.Popen([self.tessera, "run"] + args + ["--"] + cmd, stdout=f,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
            started.append((name, p, log))
        end = time.time() + STEP_TIMEOUT
        for name, p, _ in started:
            try:
                p.wait(timeout=max(1, end - time.time()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                raise RuntimeError(f"tessera run {name}: still running after {STEP_TIMEOUT:.0f} s")
        out = {}
        for name, p, log in started:
            text = open(log).read()
            if p.returncode != 0:
                raise RuntimeError(f"tessera run {name}: exit {p.returncode}:\n{text[-1500:]}")
            out[name] = text
        return out

    # ---- tessera-node ----
    def node_run(self, pods, name):
        """The pods as one scenario; ({pod name: its main container's output}, the report)."""
        folder = os.path.join(self.work, name)
        scenario = folder + ".json"
        with open(scenario, "w") as f:
            json.dump({"node": "gpu-host", "timeoutSeconds": STEP_TIMEOUT, "pods": pods}, f)
        host = os.path.join(self.node, "tessera-node-host")
        got = subprocess.run([host, "run", "--self", host, "--scenario", scenario,
                              "--node-binary", os.path.join(self.node, "tessera-node"),
                              "--hook-library", self.hook, "--dir", folder, "--",
                              "--cleanup-interval-s", "1"],
                             capture_output=True, text=True, stdin=subprocess.DEVNULL,
                             timeout=STEP_TIMEOUT + 150)
        if got.returncode != 0:
            raise RuntimeError(f"tessera-node-host: exit {got.returncode}: {got.stderr[-2000:]}")
        report = json.loads(got.stdout)
        with open(folder + ".report.json", "w") as f:
            json.dump(report, f, indent=1)
        outputs = {}
        for p in report["pods"]:
            if "error" in p:
                raise RuntimeError(f"{p['pod']}: {p['error']}")
            for c in p["containers"]:
                log = open(c["log"]).read() if os.path.exists(c.get("log", "")) else ""
                if "error" in c:
                    raise RuntimeError(f"{p['pod']}/{c['name']}: {c['error']}")
                if c.get("stoppedAtTimeout") or (c.get("exitCode") != 0 and not c["outsideLibrary"]):
                    raise RuntimeError(f"{p['pod']}/{c['name']}: {c.get('exit')}"
                                       f"{' (stopped at the timeout)' if c.get('stoppedAtTimeout') else ''}"
                                       f":\n{log[-1500:]}")
                if c["name"] == "main":
                    outputs[p["pod"].split("/")[1]] = log
        return outputs, report

    def pack(self):
        with tarfile.open(os.path.join(self.out, "logs.tgz"), "w:gz") as tar:
            def keep(info):
                return info if info.isfile() or info.isdir() else None
            tar.add(self.work, arcname="runs", filter=keep)


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
    build, node, out = (os.path.abspath(a) for a in sys.argv[1:4])
    os.makedirs(out, exist_ok=True)
    P = Paths(build, node, out)
    results = {"seconds_per_case": SECONDS, "cases": CASES}
    sec = str(SECONDS)

    def save():
        with open(os.path.join(out, "node_governor.json"), "w") as f:
            json.dump(results, f, indent=1)

    def case(name, fn):
        if name not in CASES:
            return
        if time.time() > DEADLINE:
            results[name] = {"error": "skipped: past DEADLINE_S"}
        else:
            try:
                results[name] = fn()
            except Exception as e:  # a case's failure is reported, the others still run
                results[name] = {"error": f"{type(e).__name__}: {e}"}
        print(name, json.dumps(results[name]), flush=True)
        save()

    # Preflight: does a pod start at all through tessera-node here?
    try:
        P.node_run([pod("preflight", ["true"], memory="1Gi")], "preflight")
    except Exception as e:
        results["preflight"] = {"error": f"{type(e).__name__}: {e}"}
        save()
        P.pack()
        print("preflight failed:", e, flush=True)
        return 1
    results["gemm_solo_units_per_s"] = rate(quiet(GEMM + [sec]), what="GEMM solo")
    print("solo", results["gemm_solo_units_per_s"], flush=True)

    def memory():
        r = P.run([("fill", run_args(memory="4Gi"), FILL)])["fill"]
        n, _ = P.node_run([pod("fill", FILL, memory="4Gi")], "memory")
        return {"run_gib": field(r, "allocated", "tessera run fill") / 2**30,
                "node_gib": field(n["fill"], "allocated", "tessera-node fill") / 2**30}
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
    hog_solo = None if "skip-hog" in CASES else rate(quiet(HOG + [sec]), "steps", "hog solo")
    results["hog_solo_steps_per_s"] = hog_solo
    if "skip-hog" not in CASES:
        results["lc_solo_p99_ms"] = field(quiet(LC + [str(SECONDS - 6)]), "p99_ms", "LC solo")

    def priority(mode):
        def fn():
            lc_cmd = ["sh", "-c", "sleep 4; exec " + " ".join(LC + [str(SECONDS - 6)])]
            r = P.run([("lc", run_args(memory="8Gi", priority="latency-critical", mode=mode), lc_cmd),
                       ("hog", run_args(memory="24Gi", priority="best-effort", mode=mode), HOG + [sec])])
            n, _ = P.node_run([pod("lc", lc_cmd, memory="8Gi", priority="latency-critical", mode=mode),
                               pod("hog", HOG + [sec], priority="best-effort", mode=mode)],
                              "priority-" + mode)
            return {"run_lc_p99_ms": field(r["lc"], "p99_ms", "tessera run LC"),
                    "node_lc_p99_ms": field(n["lc"], "p99_ms", "tessera-node LC"),
                    "run_hog": rate(r["hog"], "steps", "tessera run hog") / hog_solo,
                    "node_hog": rate(n["hog"], "steps", "tessera-node hog") / hog_solo}
        return fn
    case("priority", priority("shared"))
    case("mps", priority("mps"))

    def bypass():
        sneak = {"name": "sneak", "outsideLibrary": True,
                 "command": ["sh", "-c", "sleep 8; exec " + " ".join(GEMM + [str(SECONDS)])]}
        n, report = P.node_run([pod("governed", GEMM + [str(SECONDS + 10)], cores=30, extra=[sneak])],
                               "bypass")
        events = [e for e in report["events"] if isinstance(e, dict)
                  and e.get("reason") == "TesseraComputeDrift"]
        began = next(c["startedAtUnix"] for c in report["pods"][0]["containers"]
                     if c["name"] == "sneak") + 8  # the sneak's GEMM starts after its sleep
        flagged = None
        if events:
            stamp = datetime.datetime.strptime(events[0]["firstTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
            flagged = stamp.replace(tzinfo=datetime.timezone.utc).timestamp() - began
        return {"events": [e["message"] for e in events], "flagged_after_s": flagged}
    case("bypass", bypass)

    save()
    P.pack()
    print("case | tessera run | tessera-node")
    for name in ("memory", "hard30", "wc30", "pair", "priority", "mps"):
        r = results.get(name, {})
        print(name, "|", json.dumps({k: v for k, v in r.items() if k.startswith("run")}), "|",
              json.dumps({k: v for k, v in r.items() if k.startswith("node")}))


if __name__ == "__main__":
    sys.exit(main())
