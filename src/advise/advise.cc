#include "advise/advise.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tessera/quantity.h"

#include "advise/features.h"

namespace tessera::advise {
namespace {

struct ModelRow {
  GpuModel model;
  std::string_view aliases;
};

// The advise vocabulary's rows of tessera/gpu_models.def (those with an advise name), in order.
const std::vector<ModelRow>& ModelRows() {
  static const std::vector<ModelRow> rows = [] {
    std::vector<ModelRow> all = {
#define TESSERA_GPU_MODEL(id, name, memory, mig, aliases, trace_name, trace_mib, trace_rank) \
  {{name, memory, mig}, aliases},
#include "tessera/gpu_models.def"
#undef TESSERA_GPU_MODEL
    };
    std::erase_if(all, [](const ModelRow& row) { return row.model.name.empty(); });
    return all;
  }();
  return rows;
}

// "RTX PRO 6000" -> "rtx-pro-6000"
std::string Canonical(std::string_view text) {
  std::string out;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == ' ' || c == '_' || c == '-') {
      if (!out.empty() && out.back() != '-') out.push_back('-');
    } else {
      out.push_back(static_cast<char>(std::tolower(u)));
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

// What tessera enforces, and cannot, in each option: one row each.
struct OptionFacts {
  Option option;
  std::vector<std::string> enforces;
  std::vector<std::string> cannot;
};

const std::vector<OptionFacts>& Facts() {
  static const std::vector<OptionFacts> facts = {
      {Option::kShared,
       {"GPU memory cap per container on every allocation path, contexts included (CUDA "
        "out-of-memory in the offending process only)",
        "cudaMemGetInfo / nvidia-smi inside the container report the cap as the total",
        "compute share per container (the GPU busy time of its kernels) and priority between "
        "co-located tenants; time-sliced, an in-flight kernel is never preempted, so a "
        "latency-critical tenant is never worse off than under native sharing but waits for a "
        "neighbour's running kernel: beside kernels longer than its latency budget it needs MPS "
        "(trusted tiers) or MIG",
        "per-pod usage accounting, reconciled with what the driver reports per process"},
       {"a process that bypasses the preload library (static linking, raw ioctls) is not "
        "stopped by it; the node agent detects the excess from NVML and reports, kills or "
        "evicts per policy",
        "no hardware partition: memory bandwidth, L2 cache and the copy engines are shared",
        "a GPU-wide fault (some Xid errors, a GPU reset) affects every tenant of the GPU"}},
      {Option::kMps,
       {"memory cap per client (the driver's pinned-memory limit plus tessera's library)",
        "active-thread percentage per client (spatial SM share); best-effort clients leave "
        "latency-critical ones a reserve of SMs (20 % by default), so a latency-critical "
        "kernel starts beside a long one instead of after it",
        "per-pod accounting through the same library"},
       {"fault isolation: one client's fatal fault ends every client of the MPS server",
        "co-tenants must run as one user ID",
        "memory released by one client may be reused by another inside the server: tessera "
        "scrubs on release where measured necessary"}},
      {Option::kMig,
       {Built(FeatureId::kMigPlacement)
            ? "placement of pods on MIG instances by the fragmentation-aware scheduler"
            : "nothing yet: tessera does not place pods on MIG instances (admission refuses mode "
              "mig); the instances are configured and assigned outside tessera",
        "the hardware itself isolates memory, SMs, L2, bandwidth and faults per instance"},
       {"more than the GPU's maximum instances (7 on A100/H100/H200/B200)",
        "profiles are fixed sizes: requests are rounded up to the next profile",
        "re-partitioning a GPU needs it idle (dynamic MIG is not yet in tessera)"}},
      {Option::kExclusive,
       {"whole GPUs per pod, never shared; nothing to enforce between tenants",
        "freed memory is scrubbed by the driver before another process gets it (measured on "
        "H200, driver 580)"},
       {"utilization: an idle dedicated GPU is wasted capacity"}},
      {Option::kVgpu,
       {"nothing: vGPU isolates below Kubernetes, in the hypervisor; tessera schedules whole "
        "GPUs to the VM nodes"},
       {"tessera does not configure vGPU profiles or licences",
        "hypervisor overhead, typically 20-30% of bare-metal performance"}},
  };
  return facts;
}

const OptionFacts& FactsOf(Option option) {
  for (const auto& f : Facts()) {
    if (f.option == option) return f;
  }
  return Facts().front();
}

std::optional<SharingMode> ModeOf(Option option) {
  switch (option) {
    case Option::kShared:
      return SharingMode::kShared;
    case Option::kMps:
      return SharingMode::kMps;
    case Option::kMig:
      return SharingMode::kMig;
    case Option::kExclusive:
      return SharingMode::kExclusive;
    case Option::kVgpu:
      return std::nullopt;
  }
  return std::nullopt;
}

bool Has(const std::vector<Workload>& workloads, Workload w) {
  return std::find(workloads.begin(), workloads.end(), w) != workloads.end();
}

struct Candidate {
  Option option;
  std::vector<std::string> reasons;
};

// The seed's framework: the weaker the trust, the stronger the isolation.
std::vector<Candidate> FrameworkCandidates(const Request& r, std::vector<RuledOut>& ruled_out) {
  const bool inference = Has(r.workloads, Workload::kInference);
  const bool throughput =
      Has(r.workloads, Workload::kTraining) || Has(r.workloads, Workload::kBatch);
  std::vector<Candidate> out;
  switch (r.tier) {
    case TrustTier::kTeam:
      if (inference && !throughput) {
        out.push_back({Option::kMps,
                       {"one team's inference services: MPS runs their kernels side by side "
                        "(tiny kernels p50 27 us beside a long kernel, vs 304 us time-sliced, "
                        "measured on H200)",
                        "the team accepts one fault domain in exchange for latency"}});
        out.push_back({Option::kShared,
                       {"separate contexts keep one service's crash from ending the others",
                        "memory caps stop a greedy neighbour; priority keeps latency-critical "
                        "services' new work ahead (a neighbour's kernel already running is "
                        "waited for: beside kernels longer than the latency budget, MPS)"}});
      } else {
        out.push_back({Option::kShared,
                       {"high trust: sharing for utilization is worth occasional interference",
                        "memory caps stop a training job from crashing its neighbours (the "
                        "seeds' showdown)",
                        inference ? "the latency-critical priority class holds batch work back "
                                    "while inference runs (not a kernel already running: "
                                    "beside long kernels, MPS or MIG)"
                                  : "compute shares keep the split fair"}});
        out.push_back({Option::kMps,
                       {"same team, throughput matters most: one context, no context-switch "
                        "overhead",
                        "acceptable only because a fault taking down co-tenants is tolerable "
                        "within one team"}});
      }
      out.push_back({Option::kMig,
                     {"hardware boundaries when a workload needs guaranteed latency or "
                      "bandwidth"}});
      ruled_out.push_back({Option::kVgpu,
                           "licence and hypervisor cost buys isolation a single "
                           "team does not need"});
      break;
    case TrustTier::kDepartment:
      out.push_back({Option::kMig,
                     {"departments have competing priorities: without a hardware boundary, "
                      "accidental interference is likely"}});
      out.push_back({Option::kShared,
                     {"where MIG is unavailable or too coarse: enforced memory caps and compute "
                      "shares, fail-closed, co-tenancy only within the tier",
                      "a software boundary: stops accidents and greedy neighbours, not a "
                      "determined attacker"}});
      out.push_back({Option::kExclusive, {"latency-critical or large jobs get whole GPUs"}});
      ruled_out.push_back({Option::kMps,
                           "one fault domain across departments: one department's "
                           "crash would end another's jobs"});
      break;
    case TrustTier::kCustomer:
      out.push_back({Option::kExclusive,
                     {"paying customers expect guaranteed resources and full isolation: "
                      "dedicated GPUs (or dedicated nodes)"}});
      if (r.vgpu_licensed) {
        out.push_back({Option::kVgpu,
                       {"VM-level isolation with fixed memory profiles, live "
                        "migration and snapshots, where licences exist"}});
      } else {
        ruled_out.push_back({Option::kVgpu, "no vGPU licences (--vgpu-licensed not given)"});
      }
      out.push_back({Option::kMig,
                     {"hardware partitions, but only among one customer's own "
                      "pods: a customer never shares a GPU with another "
                      "namespace"}});
      out.push_back({Option::kShared,
                     {"only among one customer's own pods (co-tenancy "
                      "same-namespace), to pack its small jobs"}});
      ruled_out.push_back({Option::kMps,
                           "one fault domain and weak accounting: unacceptable "
                           "under an SLA"});
      break;
    case TrustTier::kRegulated:
      out.push_back({Option::kExclusive,
                     {"regulated or adversarial workloads: do not share at all, each tenant on "
                      "its own physical GPUs, so nothing can cross between tenants"}});
      out.push_back({Option::kMig,
                     {"only where the administrator's policy (and the regulator) "
                      "accepts hardware partitioning"}});
      ruled_out.push_back({Option::kShared,
                           "software isolation is not enough against an "
                           "adversary (static linking, raw ioctls bypass it)"});
      ruled_out.push_back({Option::kMps, "shared context and fault domain"});
      ruled_out.push_back({Option::kVgpu, "the framework asks for dedicated physical GPUs"});
      break;
  }
  return out;
}

}  // namespace

const std::vector<GpuModel>& AllGpuModels() {
  static const std::vector<GpuModel> models = [] {
    std::vector<GpuModel> v;
    for (const auto& row : ModelRows()) v.push_back(row.model);
    return v;
  }();
  return models;
}

std::string AcceptedGpuModels() {
  std::string out;
  for (const auto& m : AllGpuModels()) out += (out.empty() ? "" : ", ") + std::string(m.name);
  return out;
}

StatusOr<GpuModel> FindGpuModel(std::string_view text) {
  const std::string want = Canonical(text);
  for (const auto& row : ModelRows()) {
    if (Canonical(row.model.name) == want) return row.model;
    std::string_view aliases = row.aliases;
    while (!aliases.empty()) {
      const std::size_t comma = aliases.find(',');
      if (aliases.substr(0, comma) == want) return row.model;
      aliases = comma == std::string_view::npos ? std::string_view() : aliases.substr(comma + 1);
    }
  }
  return InvalidArgumentError("--gpu: \"" + QuoteForMessage(text) +
                              "\" is not a known GPU model; accepted: " + AcceptedGpuModels());
}

StatusOr<std::vector<Workload>> ParseWorkloads(std::string_view text) {
  static constexpr std::string_view kAccepted =
      "accepted: a comma-separated list of inference, training, batch";
  std::vector<Workload> out;
  if (text.empty()) return InvalidArgumentError("--workloads: is empty; " + std::string(kAccepted));
  while (true) {
    const std::size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    bool found = false;
#define TESSERA_WORKLOAD_MATCH(name, word, meaning)               \
  if (!found && item == (word)) {                                 \
    found = true;                                                 \
    if (!Has(out, Workload::name)) out.push_back(Workload::name); \
  }
    TESSERA_WORKLOADS(TESSERA_WORKLOAD_MATCH)
#undef TESSERA_WORKLOAD_MATCH
    if (!found) {
      return InvalidArgumentError("--workloads: \"" + QuoteForMessage(item) +
                                  "\" is not a workload; " + std::string(kAccepted));
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

std::string_view Name(Option option) {
  switch (option) {
#define TESSERA_OPTION_CASE(name, text) \
  case Option::name:                    \
    return text;
    TESSERA_OPTIONS(TESSERA_OPTION_CASE)
#undef TESSERA_OPTION_CASE
  }
  return "unknown";
}

const std::vector<ComparisonRow>& ComparisonTable() {
  // The seed's table (chapter "why GPU multi-tenancy is hard"), plus tessera's shared mode.
  static const std::vector<ComparisonRow> rows = {
      {"MPS", "none", "excellent", "low", "any GPU"},
      {"time-slicing", "none", "good", "low", "any GPU"},
      {"tessera shared", "software: memory caps, compute shares, priority, accounting", "good",
       "low", "any GPU"},
      {"MIG", "hardware", "good", "medium", "A100/A30/H100/H200/B200/RTX PRO 6000"},
      {"vGPU", "virtual machine", "fair (70-80%)", "high", "licences + supported GPU"},
      {"dedicated", "complete", "perfect", "low", "any GPU"},
  };
  return rows;
}

Advice Advise(const Request& request) {
  Advice advice;
  advice.request = request;
  std::vector<Candidate> candidates = FrameworkCandidates(request, advice.ruled_out);

  std::vector<Candidate> kept;
  for (auto& c : candidates) {
    if (c.option == Option::kMig && request.gpu && request.gpu->mig_max_instances == 0) {
      advice.ruled_out.push_back({c.option, std::string(request.gpu->name) + " has no MIG"});
      continue;
    }
    if (c.option == Option::kMig && !request.gpu) {
      c.reasons.push_back("needs a MIG-capable GPU (" + AcceptedGpuModels() +
                          " lists which; pass --gpu to check)");
    }
    if (c.option == Option::kMig && request.gpu) {
      c.reasons.push_back(std::string(request.gpu->name) + ": up to " +
                          std::to_string(request.gpu->mig_max_instances) + " instances");
    }
    const auto mode = ModeOf(c.option);
    if (request.policy != nullptr && mode && !request.policy->Rule(request.tier).Allows(*mode)) {
      advice.ruled_out.push_back({c.option, "the policy file does not allow it for tier " +
                                                std::string(Name(request.tier))});
      continue;
    }
    kept.push_back(std::move(c));
  }
  if (kept.empty()) {
    // Something must remain: whole GPUs are always possible.
    kept.push_back({Option::kExclusive, {"every sharing mode was ruled out; whole GPUs remain"}});
  }
  for (auto& c : kept) {
    const auto& facts = FactsOf(c.option);
    advice.recommended.push_back({c.option, std::move(c.reasons), facts.enforces, facts.cannot});
  }
  if (request.policy != nullptr) {
    const auto& rule = request.policy->Rule(request.tier);
    advice.notes.push_back("policy: tier " + std::string(Name(request.tier)) + " co-tenancy " +
                           std::string(policy::Name(rule.co_tenancy)) + ", enforcement " +
                           std::string(policy::Name(rule.enforcement)) + ", on drift " +
                           std::string(policy::Name(rule.on_drift)));
  }
  if (request.gpu) {
    advice.notes.push_back(std::string(request.gpu->name) + ": " +
                           std::to_string(request.gpu->memory_gib) +
                           " GiB; each CUDA context takes about 0.5 GiB of it (measured on H200), "
                           "which tessera charges to the pod");
  }
  advice.notes.push_back(
      "user-space interception stops accidents and greedy neighbours, not a determined attacker; "
      "tiers facing one need MIG or dedicated GPUs");
  std::string built = "this release builds: ", missing = "not built yet: ";
  for (const Feature& f : kFeatures) {
    std::string& list = f.built ? built : missing;
    if (!list.ends_with(": ")) list += "; ";
    list += f.text;
  }
  advice.notes.push_back(built);
  advice.notes.push_back(missing);
  return advice;
}

std::string RenderText(const Advice& advice) {
  std::ostringstream out;
  const Request& r = advice.request;
  out << "Trust tier: " << Name(r.tier);
  if (r.gpu) out << "   GPU: " << r.gpu->name;
  if (!r.workloads.empty()) {
    out << "   workloads:";
    for (Workload w : r.workloads) {
#define TESSERA_WORKLOAD_PRINT(name, word, meaning) \
  if (w == Workload::name) out << " " << (word);
      TESSERA_WORKLOADS(TESSERA_WORKLOAD_PRINT)
#undef TESSERA_WORKLOAD_PRINT
    }
  }
  out << (r.vgpu_licensed ? "   vGPU licences: yes" : "") << "\n\nRecommended, best first:\n";
  int rank = 1;
  for (const auto& rec : advice.recommended) {
    out << "\n" << rank++ << ". " << Name(rec.option) << "\n   why:\n";
    for (const auto& s : rec.reasons) out << "     - " << s << "\n";
    out << "   tessera enforces:\n";
    for (const auto& s : rec.enforces) out << "     - " << s << "\n";
    out << "   tessera cannot:\n";
    for (const auto& s : rec.cannot) out << "     - " << s << "\n";
  }
  if (!advice.ruled_out.empty()) {
    out << "\nRuled out:\n";
    for (const auto& ro : advice.ruled_out)
      out << "  - " << Name(ro.option) << ": " << ro.reason << "\n";
  }
  out << "\nThe options compared (from the seeds):\n";
  char line[256];
  std::snprintf(line, sizeof(line), "  %-15s | %-60s | %-14s | %-10s | %s\n", "option", "isolation",
                "performance", "complexity", "hardware");
  out << line;
  for (const auto& row : ComparisonTable()) {
    std::snprintf(line, sizeof(line), "  %-15.*s | %-60.*s | %-14.*s | %-10.*s | %.*s\n",
                  static_cast<int>(row.option.size()), row.option.data(),
                  static_cast<int>(row.isolation.size()), row.isolation.data(),
                  static_cast<int>(row.performance.size()), row.performance.data(),
                  static_cast<int>(row.complexity.size()), row.complexity.data(),
                  static_cast<int>(row.hardware.size()), row.hardware.data());
    out << line;
  }
  out << "\nNotes:\n";
  for (const auto& n : advice.notes) out << "  - " << n << "\n";
  return out.str();
}

std::string RenderJson(const Advice& advice) {
  nlohmann::ordered_json j;
  const Request& r = advice.request;
  j["tier"] = Name(r.tier);
  if (r.gpu) {
    j["gpu"] = {{"model", r.gpu->name},
                {"memoryGiB", r.gpu->memory_gib},
                {"migMaxInstances", r.gpu->mig_max_instances}};
  }
  j["workloads"] = nlohmann::ordered_json::array();
  for (Workload w : r.workloads) {
#define TESSERA_WORKLOAD_JSON(name, word, meaning) \
  if (w == Workload::name) j["workloads"].push_back(word);
    TESSERA_WORKLOADS(TESSERA_WORKLOAD_JSON)
#undef TESSERA_WORKLOAD_JSON
  }
  j["vgpuLicensed"] = r.vgpu_licensed;
  j["recommended"] = nlohmann::ordered_json::array();
  for (const auto& rec : advice.recommended) {
    j["recommended"].push_back({{"mode", Name(rec.option)},
                                {"providedByTessera", rec.option != Option::kVgpu},
                                {"reasons", rec.reasons},
                                {"enforces", rec.enforces},
                                {"cannot", rec.cannot}});
  }
  j["ruledOut"] = nlohmann::ordered_json::array();
  for (const auto& ro : advice.ruled_out) {
    j["ruledOut"].push_back({{"mode", Name(ro.option)}, {"reason", ro.reason}});
  }
  j["comparison"] = nlohmann::ordered_json::array();
  for (const auto& row : ComparisonTable()) {
    j["comparison"].push_back({{"option", row.option},
                               {"isolation", row.isolation},
                               {"performance", row.performance},
                               {"complexity", row.complexity},
                               {"hardware", row.hardware}});
  }
  j["notes"] = advice.notes;
  return j.dump(2);
}

}  // namespace tessera::advise
