// `tessera demo`: the seeds' scenarios replayed on a real control plane with simulated GPU nodes
// (docs/demo.md).
//
// It starts, as local child processes: the control plane (`tessera-testcluster up`: etcd,
// kube-apiserver, kube-scheduler from the upstream modules, kube-scheduler configured to call
// tessera-scheduler), one `tessera-testcluster simnodes` per simulated node (it registers the
// Node and plays its kubelet: bound pods go Running), one tessera-node per node over the fake NVML
// (it publishes the node's GPU inventory, as on a real node), and tessera-scheduler with its
// admission webhooks (a CA made for the run, a decision-signing key made for the run) and the
// demo's policy. Then it replays each scenario of Scenarios() in its own namespaces: creates the
// pods one by one, waits for each to be bound (with its signed decision), refused at admission,
// or refused by the scheduler (FailedScheduling), reads back the scheduler's per-GPU ledger, and
// says what tessera-node and the preload library would enforce for each placed pod. Afterwards
// every child is stopped and the temporary folder removed, also on failure and on Ctrl-C.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "tessera/status.h"

namespace tessera::demo {

// ---- the scenarios (scenarios.cc: one table) ----------------------------------------------

enum class Outcome : std::uint8_t { kPlaced, kDenied, kUnschedulable };
std::string_view Name(Outcome outcome);  // "placed", "denied", "unschedulable"

// One pod of a scenario, as a person would write its manifest.
struct PodSpec {
  std::string ns;
  std::string name;
  std::string memory;          // tessera.dev/gpu-memory ("2Gi"), or ""
  int cores = 0;               // tessera.dev/gpu-cores (percent), 0: none
  int gpus = 0;                // tessera.dev/gpu (whole GPUs), 0: none
  std::string priority;        // annotation tessera.dev/priority, or ""
  std::string mode;            // annotation tessera.dev/mode, or ""
  std::string kai_memory_mib;  // KAI: annotation gpu-memory (MiB) + schedulerName kai-scheduler
  std::string kai_fraction;    // KAI: annotation gpu-fraction + schedulerName kai-scheduler
  std::string command;         // what the container runs (for the `tessera run` line)
  Outcome expect = Outcome::kPlaced;
};

struct Scenario {
  std::string id;                  // "showdown": --only takes these
  std::string title;               // one line
  std::string seed;                // where the story comes from
  std::vector<std::string> story;  // what is about to happen, a few short lines
  std::string node;                // the node its pods are pinned to (nodeSelector), "" for any
  std::vector<PodSpec> pods;
  std::vector<std::string> moral;  // what it showed, a few short lines
  std::string show_limits_of;      // this pod's limits file is printed in full
};

// A simulated GPU node: a Node (simnodes) whose GPUs tessera-node reads from the fake NVML.
struct SimNode {
  std::string name;
  int gpus = 0;
  std::uint64_t gpu_memory = 0;  // bytes per GPU
  int sm_count = 0;
  std::string stands_for;  // "the seeds' Tesla T4"
};

const std::vector<Scenario>& Scenarios();
const std::vector<SimNode>& SimulatedNodes();
// The policy file the demo's tessera-scheduler runs with.
const std::string& DemoPolicyYaml();
// PriorityClasses the policy maps tessera's priorities to (name, value).
const std::vector<std::pair<std::string, int>>& DemoPriorityClasses();
// "showdown, realtime, ..." (for messages).
std::string ScenarioIds();

// ---- what happened --------------------------------------------------------------------------

struct PodResult {
  PodSpec spec;
  std::string tier;  // of its namespace, by the policy
  Outcome outcome = Outcome::kDenied;
  bool as_expected = false;
  // Placed:
  std::string node;
  int gpu = -1;  // position among the node's GPUs
  std::string uuid;
  std::uint64_t memory_bytes = 0;
  std::uint32_t cores = 0;               // percent; 0: no share reserved
  std::string mode;                      // shared, mps, exclusive
  std::string priority;                  // tessera priority class
  std::string priority_class;            // the Kubernetes PriorityClass it runs with
  std::vector<std::string> admitted_as;  // what the mutating webhook changed, one item a line
  std::string limits_file;               // what tessera-node would write for it
  std::vector<std::string> enforcement;  // what would act, one sentence a line
  std::vector<std::string> tier_rules;   // what its tier adds (machinery failure, drift)
  std::string run_command;               // the same limits on a GPU host, without Kubernetes
  // Denied or unschedulable:
  std::string reason;                 // the webhook's message, or the FailedScheduling event's
  std::vector<std::string> verdicts;  // unschedulable: tessera's per-GPU dry run (explain)
};

struct GpuRow {
  std::string node;
  int gpu = 0;
  std::string uuid;
  std::uint64_t memory_bytes = 0;
  std::uint64_t memory_used = 0;
  int cores_used = 0;             // percent
  std::vector<std::string> pods;  // names
};

struct ScenarioResult {
  std::string id;
  std::string title;
  std::vector<PodResult> pods;
  std::vector<GpuRow> gpus;  // the GPUs the scenario could use, after it
  double seconds = 0;
};

struct NodeResult {
  SimNode spec;
  std::vector<std::string> uuids;  // the managed GPUs, in order
  std::string model;               // as the inventory reports it
};

struct PolicyRow {
  std::string tier, modes, co_tenancy, enforcement, on_drift;
  std::vector<std::string> namespaces;  // "*" for the default tier's "any other namespace"
};

struct DemoResult {
  std::vector<NodeResult> nodes;
  std::vector<PolicyRow> policy;
  std::vector<std::string> quotas;      // "data-analytics: GPU memory 8Gi"
  std::vector<std::string> priorities;  // "latency-critical -> tessera-latency-critical (1000000)"
  std::string placement;                // the scheduler's placement policy
  double startup_seconds = 0;
  bool gpu_present = false;  // this machine has an NVIDIA GPU
  std::vector<ScenarioResult> scenarios;
  bool completed = false;  // every selected scenario ran
  int unexpected() const;
};

// ---- running it -----------------------------------------------------------------------------

struct DemoOptions {
  std::string testcluster;        // tessera-testcluster (test/e2e/harness/build.sh)
  std::string scheduler;          // tessera-scheduler
  std::string node;               // tessera-node
  std::string fake_nvml_dir;      // the folder holding the fake libnvidia-ml.so.1
  std::vector<std::string> only;  // scenario ids; empty: all
  bool keep = false;              // keep the temporary folder (logs, state) and say where
};

// Fills empty paths with the defaults found from `exe_dir` (the tessera binary's folder, in a
// build tree or beside installed binaries) and $TESSERA_TESTCLUSTER.
void FillDefaults(DemoOptions& options, const std::string& exe_dir);
// Every path exists and is what it should be, every --only names a scenario; errors name the
// flag and the accepted form.
Status ValidateOptions(const DemoOptions& options);

// Runs the demo. With `human` set, the story is written there as it happens; progress and
// failures (with the log of the process that failed) go to `err`. Returns what happened,
// also when a step failed (then with completed false); kAborted after Ctrl-C.
Status RunDemo(const DemoOptions& options, std::ostream* human, std::ostream& err,
               DemoResult* result);

// The machine-readable summary (`--json`).
std::string ResultToJson(const DemoResult& result);

// ---- a real node (`tessera demo --real-node KUBECONFIG`, real_node.cc) ----------------------
//
// The showdown's pods as real containers on a cluster where tessera is installed (its chart:
// tessera-node's device plugin on a real kubelet, tessera-scheduler and its webhooks): each pod
// is created as the scenario writes it (its namespace made if missing), not pinned to a node, one
// at a time, and its container runs the CUDA client of the pod template's image, which
// allocates 64 MiB at a time until CUDA refuses, prints what it got and what cuMemGetInfo says,
// and keeps it until every pod is judged. A placed pod ends as expected when its process was
// refused for memory with cuMemGetInfo showing its cap as the total and less than a step free.
// The other scenarios need the demo's own policy, namespaces and nodes: not run there. The pods
// (and a namespace it made) are deleted afterwards.

// What the cluster's containers need beyond the scenario's pod (a JSON object, --pod-template):
//   image          (required) an image holding the CUDA client (test/integration/hook_client)
//   client         the client's path in the image (default "hook_client", found on PATH)
//   schedulerName  the kube-scheduler profile that calls tessera-scheduler (default: the chart's,
//                  "tessera")
//   env, volumes, volumeMounts   added to the container / the pod as given (Kubernetes objects)
struct PodTemplate {
  std::string image;
  std::string client = "hook_client";
  std::string scheduler_name = "tessera";
  std::string env_json = "[]", volumes_json = "[]", mounts_json = "[]";  // JSON arrays
};
// Errors name the field and the accepted form.
StatusOr<PodTemplate> ParsePodTemplate(std::string_view text);

inline constexpr std::uint64_t kRealNodeChunk = 64ULL << 20;  // the client's allocation step

struct RealPodResult {
  PodSpec spec;
  Outcome outcome = Outcome::kDenied;
  std::string reason;  // denied or unschedulable: why
  std::string node, uuid;
  std::uint64_t cap_bytes = 0;  // placed: the memory its decision grants
  std::string phase;            // the pod's phase when judged ("" while not; "denied", "Pending")
  // What its process printed (hook_client's key=value lines):
  bool ran = false;                   // a context was made
  std::uint64_t allocated = 0;        // before CUDA refused
  int last_result = -1;               // the CUresult that refused
  std::uint64_t total = 0, free = 0;  // cuMemGetInfo's, after the refusal
  std::vector<std::string> output;    // its lines, as printed
  bool as_expected = false;           // placed: refused at its cap (the cap its total)
};
// Fills the fields of a placed pod's process from its log, and judges it.
void ReadClientOutput(const std::string& log, RealPodResult* r);

struct RealNodeResult {
  std::string node, kubelet, runtime, os;
  std::uint64_t slots = 0;
  std::vector<std::pair<std::string, std::vector<RealPodResult>>> scenarios;  // id, its pods
  bool completed = false;
  int unexpected() const;
};

struct RealNodeOptions {
  std::string kubeconfig;
  std::string pod_template;       // a file (PodTemplate)
  std::vector<std::string> only;  // scenario ids: only "showdown" runs on a real node
};

// Runs the scenarios on the cluster; `human` as RunDemo's. kAborted after Ctrl-C (the pods are
// deleted all the same).
Status RunRealNodeDemo(const RealNodeOptions& options, std::ostream* human, std::ostream& err,
                       RealNodeResult* result);

}  // namespace tessera::demo
