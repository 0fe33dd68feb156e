// The demo's scenarios, nodes and policy: one table each. The stories are the seeds' (the
// scheduler showdown of chapter 000, the batch job and the realtime service of chapter 002, the
// trust framework), replayed with tessera's asks.
#include <string>
#include <vector>

#include "demo/demo.h"

namespace tessera::demo {
namespace {

constexpr std::uint64_t kGiB = 1ULL << 30;

PodSpec Memory(std::string ns, std::string name, std::string memory, std::string command,
               Outcome expect = Outcome::kPlaced) {
  PodSpec p;
  p.ns = std::move(ns);
  p.name = std::move(name);
  p.memory = std::move(memory);
  p.command = std::move(command);
  p.expect = expect;
  return p;
}

PodSpec Kai(std::string name, std::string mib, std::string fraction, std::string command) {
  PodSpec p;
  p.ns = "kai";
  p.name = std::move(name);
  p.kai_memory_mib = std::move(mib);
  p.kai_fraction = std::move(fraction);
  p.command = std::move(command);
  return p;
}

std::vector<Scenario> MakeScenarios() {
  std::vector<Scenario> all;
  {
    Scenario s;
    s.id = "showdown";
    s.title = "The showdown: four pods, one 16 GiB GPU";
    s.seed = "seed 000, \"the scheduler showdown\" (one Tesla T4, 16 GB)";
    s.story = {
        "Two inference services (2Gi each), training (8Gi) and preprocessing (3000Mi) ask for",
        "parts of the seeds' T4. On paper they fit. Under KAI or time-slicing nothing holds them",
        "to it: training took 11 GB and preprocessing died of CUDA out-of-memory. Then a fifth",
        "pod asks for 2Gi more.",
    };
    s.node = "t4-000";
    s.pods = {
        Memory("showdown", "inference-1", "2Gi", "python3 serve.py"),
        Memory("showdown", "inference-2", "2Gi", "python3 serve.py"),
        Memory("showdown", "training", "8Gi", "python3 train.py"),
        Memory("showdown", "preprocessing", "3000Mi", "python3 preprocess.py"),
        Memory("showdown", "inference-3", "2Gi", "python3 serve.py", Outcome::kUnschedulable),
    };
    s.moral = {
        "The four share the one GPU, and the fifth is told why it waits instead of being",
        "squeezed in. Each cap is in the pod's own read-only limits file: training's growth past",
        "8 GiB (its CUDA context counts) fails inside training, so preprocessing keeps its 3000 "
        "MiB",
        "(measured on an H200: docs/benchmarks.md, the showdown under tessera run).",
    };
    s.show_limits_of = "training";
    all.push_back(std::move(s));
  }
  {
    Scenario s;
    s.id = "realtime";
    s.title = "Realtime inference beside a 60-minute batch job";
    s.seed = "seed 002, quality of service (batch-processor, realtime-inference)";
    s.story = {
        "A batch job starts first. In the seed it holds the whole GPU (nvidia.com/gpu: 1) and the",
        "realtime service stays Pending for an hour. Here the batch job asks for what it uses",
        "(10Gi, best-effort) and the realtime service for 4Gi, 60 % of the compute and",
        "latency-critical priority.",
    };
    s.node = "t4-000";
    PodSpec batch = Memory("engineering", "batch-processor", "10Gi", "python3 batch.py");
    batch.priority = "best-effort";
    PodSpec realtime = Memory("marketing", "realtime-inference", "4Gi", "python3 serve.py");
    realtime.cores = 60;
    realtime.priority = "latency-critical";
    s.pods = {batch, realtime};
    s.moral = {
        "Both run now, on the same GPU. While realtime-inference has work, the GPU's arbiter",
        "holds the batch job's launches; when it is idle, the batch job has the GPU again.",
    };
    s.show_limits_of = "realtime-inference";
    all.push_back(std::move(s));
  }
  {
    Scenario s;
    s.id = "kai";
    s.title = "The seeds' KAI manifests, translated at admission";
    s.seed = "seed 000, the same four pods written for KAI-Scheduler";
    s.story = {
        "The showdown's pods as the seed writes them for KAI: schedulerName kai-scheduler and",
        "GPU memory in MiB as an annotation (gpu-memory: \"2000\"), plus a notebook asking for",
        "gpu-fraction 0.0625. tessera's mutating webhook adopts them as they are.",
    };
    s.node = "t4-000";
    s.pods = {
        Kai("inference-1", "2000", "", "python3 serve.py"),
        Kai("inference-2", "2000", "", "python3 serve.py"),
        Kai("training", "8000", "", "python3 train.py"),
        Kai("preprocessing", "3000", "", "python3 preprocess.py"),
        Kai("notebook", "", "0.0625", "jupyter lab"),
    };
    s.moral = {
        "KAI records such asks and places them; tessera also keeps them: every pod carries a",
        "signed decision, and the node agent turns it into the cap the preload library holds.",
    };
    all.push_back(std::move(s));
  }
  {
    Scenario s;
    s.id = "trust";
    s.title = "Trust tiers: who may share a GPU with whom";
    s.seed = "the seeds' decision framework: team, department, customer, regulated";
    s.story = {
        "Two customers (acme-corp, globex) and a regulated namespace (fraud-detection) on a",
        "node with two GPUs. Customers never share across namespaces; regulated gets whole",
        "GPUs only. Last, an engineer asks for MPS without saying which user it runs as.",
    };
    s.node = "a10-000";
    PodSpec whole;
    whole.ns = "fraud-detection";
    whole.name = "scoring";
    whole.gpus = 1;
    whole.command = "python3 score.py";
    PodSpec mps = Memory("engineering", "notebook", "4Gi", "jupyter lab", Outcome::kDenied);
    mps.mode = "mps";
    s.pods = {
        Memory("acme-corp", "chatbot", "6Gi", "python3 serve.py"),
        whole,
        Memory("globex", "recsys", "4Gi", "python3 serve.py", Outcome::kUnschedulable),
        Memory("fraud-detection", "scoring-lite", "2Gi", "python3 score.py", Outcome::kDenied),
        mps,
    };
    s.moral = {
        "The tier comes from the administrator's policy, never from the pod. globex waits rather",
        "than share acme-corp's GPU; a regulated shared-GPU ask and an MPS pod without its user",
        "are refused before anything is stored.",
    };
    all.push_back(std::move(s));
  }
  {
    Scenario s;
    s.id = "quota";
    s.title = "Quotas: GPU memory per namespace";
    s.seed = "policy file quotas (a ResourceQuota cannot count parts of GPUs)";
    s.story = {
        "data-analytics may hold 8Gi of GPU memory in all. It asks for 6Gi, then 4Gi, then 2Gi.",
    };
    s.pods = {
        Memory("data-analytics", "etl", "6Gi", "python3 etl.py"),
        Memory("data-analytics", "features", "4Gi", "python3 features.py", Outcome::kDenied),
        Memory("data-analytics", "report", "2Gi", "python3 report.py"),
    };
    s.moral = {
        "The second ask is refused at admission with the numbers; the third still fits.",
    };
    all.push_back(std::move(s));
  }
  {
    Scenario s;
    s.id = "packing";
    s.title = "Packing a mix so that a whole GPU stays free";
    s.seed = "FGD (ATC'23) fragmentation; tessera sim reproduces its results";
    s.story = {
        "Eight services of 2 to 20 GiB, then a fine-tuning job that needs a whole GPU, on all",
        "five GPUs. Spread one per GPU, the eight would leave no GPU whole; packed, they do.",
    };
    PodSpec vision = Memory("mix", "vision", "4Gi", "python3 vision.py");
    vision.cores = 25;
    PodSpec finetune;
    finetune.ns = "mix";
    finetune.name = "finetune";
    finetune.gpus = 1;
    finetune.command = "torchrun finetune.py";
    s.pods = {
        Memory("mix", "llm-serve", "20Gi", "python3 serve.py"),
        Memory("mix", "embeddings", "12Gi", "python3 embed.py"),
        Memory("mix", "asr", "10Gi", "python3 asr.py"),
        Memory("mix", "ocr", "8Gi", "python3 ocr.py"),
        Memory("mix", "rerank", "6Gi", "python3 rerank.py"),
        vision,
        Memory("mix", "tts", "4Gi", "python3 tts.py"),
        Memory("mix", "tiny", "2Gi", "python3 tiny.py"),
        finetune,
    };
    s.moral = {
        "Best-fit put each service on the fullest GPU it fits, so the whole-GPU job still found",
        "an idle GPU; no GPU is left with memory too small for any of these asks.",
    };
    all.push_back(std::move(s));
  }
  return all;
}

}  // namespace

std::string_view Name(Outcome outcome) {
  switch (outcome) {
    case Outcome::kPlaced:
      return "placed";
    case Outcome::kDenied:
      return "denied";
    case Outcome::kUnschedulable:
      return "unschedulable";
  }
  return "unknown";
}

const std::vector<Scenario>& Scenarios() {
  static const std::vector<Scenario> scenarios = MakeScenarios();
  return scenarios;
}

const std::vector<SimNode>& SimulatedNodes() {
  static const std::vector<SimNode> nodes = {
      {"t4-000", 1, 16 * kGiB, 40, "the seeds' Tesla T4"},
      {"a10-000", 2, 24 * kGiB, 72, "two A10-class GPUs"},
      {"l40s-000", 2, 48 * kGiB, 142, "two L40S-class GPUs"},
  };
  return nodes;
}

const std::string& DemoPolicyYaml() {
  static const std::string yaml =
      R"(# tessera demo: the administrator's policy (api/config/v1/policy.example.yaml explains it).
version: v1
tierAssignment:
  defaultTier: team
  namespaces:
    engineering: team
    marketing: team
    data-analytics: department
    acme-corp: customer
    globex: customer
    fraud-detection: regulated
quotas:
  data-analytics: {gpuMemory: 8Gi}
priorityClasses:
  latency-critical: tessera-latency-critical
  normal: tessera-normal
  best-effort: tessera-best-effort
)";
  return yaml;
}

const std::vector<std::pair<std::string, int>>& DemoPriorityClasses() {
  static const std::vector<std::pair<std::string, int>> classes = {
      {"tessera-latency-critical", 1000000}, {"tessera-normal", 1000}, {"tessera-best-effort", 0}};
  return classes;
}

std::string ScenarioIds() {
  std::string out;
  for (const Scenario& s : Scenarios()) out += (out.empty() ? "" : ", ") + s.id;
  return out;
}

int DemoResult::unexpected() const {
  int n = 0;
  for (const ScenarioResult& s : scenarios) {
    for (const PodResult& p : s.pods) n += p.as_expected ? 0 : 1;
  }
  return n;
}

}  // namespace tessera::demo
