#include "policy/policy.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "tessera/file.h"
#include "tessera/names.h"
#include "tessera/quantity.h"

#include "policy/rows.h"

namespace tessera::policy {
namespace {

using internal::kCoTenancyRows;
using internal::kDriftRows;
using internal::kEnforcementRows;

bool IsDnsLabel(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && !(c == '-' && i != 0 && i + 1 != s.size())) return false;
  }
  return true;
}

bool IsDnsSubdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t dot = s.find('.', start);
    const std::string_view part =
        s.substr(start, dot == std::string_view::npos ? dot : dot - start);
    if (!IsDnsLabel(part)) return false;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return true;
}

constexpr std::string_view kDnsLabelForm =
    "accepted: a Kubernetes namespace name (lower-case letters, digits and '-', at most 63, "
    "starting and ending with a letter or digit)";

// Collects every problem with its field path and line; nothing is applied unless none is found.
class Problems {
 public:
  void Add(const std::string& path, const YAML::Node& at, std::string_view what) {
    std::string line = path;
    if (at.IsDefined() && at.Mark().line >= 0)
      line += " (line " + std::to_string(at.Mark().line + 1) + ")";
    line += ": ";
    line += what;
    list_.push_back(std::move(line));
  }
  bool empty() const { return list_.empty(); }
  Status ToStatus() const {
    std::string message = "the policy file is invalid (" + std::to_string(list_.size()) +
                          (list_.size() == 1 ? " problem" : " problems") +
                          "; nothing was applied):";
    for (const auto& p : list_) message += "\n  " + p;
    return InvalidArgumentError(std::move(message));
  }

 private:
  std::vector<std::string> list_;
};

std::string Quoted(const YAML::Node& node) {
  if (node.IsScalar()) return "\"" + QuoteForMessage(node.Scalar()) + "\"";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "nothing";
}

// Checks that `node` is a mapping whose keys are among `allowed` and are not repeated.
bool CheckMap(const YAML::Node& node, const std::string& path,
              std::initializer_list<std::string_view> allowed, Problems& problems) {
  if (!node.IsMap()) {
    problems.Add(path, node, "is " + Quoted(node) + "; accepted: a mapping");
    return false;
  }
  std::set<std::string> seen;
  for (const auto& kv : node) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : std::string();
    if (!kv.first.IsScalar()) {
      problems.Add(path, kv.first, "has a key that is not a plain string");
      continue;
    }
    if (!seen.insert(key).second) {
      problems.Add(path + "." + key, kv.first, "is given twice");
    }
    if (allowed.size() != 0 && std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string accepted;
      for (auto a : allowed) accepted += (accepted.empty() ? "" : ", ") + std::string(a);
      problems.Add(path + "." + key, kv.first, "is not a known field; accepted: " + accepted);
    }
  }
  return true;
}

std::optional<std::string> Scalar(const YAML::Node& node, const std::string& path,
                                  std::string_view form, Problems& problems) {
  if (!node.IsScalar()) {
    problems.Add(path, node, "is " + Quoted(node) + "; " + std::string(form));
    return std::nullopt;
  }
  return node.Scalar();
}

template <typename Parsed>
void Report(const StatusOr<Parsed>& parsed, const std::string& path, const YAML::Node& at,
            Problems& problems) {
  if (!parsed.ok()) problems.Add(path, at, parsed.status().message());
}

std::optional<TrustTier> ParseTierAt(const YAML::Node& node, const std::string& path,
                                     Problems& problems) {
  auto text = Scalar(node, path, "accepted: " + AcceptedTrustTiers(), problems);
  if (!text) return std::nullopt;
  auto tier = ParseTrustTier(*text);
  Report(tier, path, node, problems);
  return tier.ok() ? std::optional(*tier) : std::nullopt;
}

template <typename Enum, std::size_t N>
std::optional<Enum> ParseEnumAt(const YAML::Node& node, const std::string& path,
                                const std::array<EnumRow<Enum>, N>& rows, std::string_view what,
                                Problems& problems) {
  auto text = Scalar(node, path, "accepted: " + AcceptedIn(rows), problems);
  if (!text) return std::nullopt;
  auto value = ParseIn(rows, *text, what);
  Report(value, path, node, problems);
  return value.ok() ? std::optional(*value) : std::nullopt;
}

void ParseTierAssignment(const YAML::Node& node, Policy& policy, Problems& problems) {
  const std::string path = "tierAssignment";
  if (!CheckMap(node, path, {"defaultTier", "namespaces", "honorNamespaceLabel"}, problems)) return;
  if (node["defaultTier"]) {
    if (auto tier = ParseTierAt(node["defaultTier"], path + ".defaultTier", problems)) {
      policy.default_tier = *tier;
    }
  }
  if (const YAML::Node label = node["honorNamespaceLabel"]) {
    auto text = Scalar(label, path + ".honorNamespaceLabel", "accepted: true, false", problems);
    if (text && (*text == "true" || *text == "false")) {
      policy.honor_namespace_label = *text == "true";
    } else if (text) {
      problems.Add(path + ".honorNamespaceLabel", label,
                   "\"" + QuoteForMessage(*text) + "\" is not a boolean; accepted: true, false");
    }
  }
  if (const YAML::Node namespaces = node["namespaces"]) {
    if (!CheckMap(namespaces, path + ".namespaces", {}, problems)) return;
    for (const auto& kv : namespaces) {
      if (!kv.first.IsScalar()) continue;
      const std::string ns = kv.first.Scalar();
      const std::string at = path + ".namespaces." + ns;
      if (!IsDnsLabel(ns)) {
        problems.Add(at, kv.first, "\"" + QuoteForMessage(ns) + "\" " + std::string(kDnsLabelForm));
        continue;
      }
      if (auto tier = ParseTierAt(kv.second, at, problems)) policy.namespaces[ns] = *tier;
    }
  }
}

void ParseTierRule(const YAML::Node& node, const std::string& path, TierRule& rule,
                   Problems& problems) {
  if (!CheckMap(node, path, {"modes", "coTenancy", "enforcement", "onDrift"}, problems)) return;
  rule.from_file = true;
  if (const YAML::Node modes = node["modes"]) {
    if (!modes.IsSequence() || modes.size() == 0) {
      problems.Add(path + ".modes", modes,
                   "is " + Quoted(modes) + "; accepted: a non-empty list of " +
                       "shared, mps, exclusive, mig");
    } else {
      rule.modes.clear();
      for (std::size_t i = 0; i < modes.size(); ++i) {
        const std::string at = path + ".modes[" + std::to_string(i) + "]";
        auto text = Scalar(modes[i], at, "accepted: shared, mps, exclusive, mig", problems);
        if (!text) continue;
        auto mode = ParseSharingMode(*text);
        if (!mode.ok()) {
          problems.Add(at, modes[i],
                       "\"" + QuoteForMessage(*text) +
                           "\" is not a sharing mode; accepted: shared, mps, "
                           "exclusive, mig");
        } else if (*mode == SharingMode::kNative) {
          problems.Add(at, modes[i],
                       "\"native\" is a measurement baseline, not a policy mode; accepted: "
                       "shared, mps, exclusive, mig");
        } else if (std::find(rule.modes.begin(), rule.modes.end(), *mode) != rule.modes.end()) {
          problems.Add(at, modes[i], "\"" + *text + "\" is listed twice");
        } else {
          rule.modes.push_back(*mode);
        }
      }
    }
  }
  if (node["coTenancy"]) {
    if (auto v = ParseEnumAt(node["coTenancy"], path + ".coTenancy", kCoTenancyRows,
                             "co-tenancy rule", problems)) {
      rule.co_tenancy = *v;
    }
  }
  if (node["enforcement"]) {
    if (auto v = ParseEnumAt(node["enforcement"], path + ".enforcement", kEnforcementRows,
                             "enforcement mode", problems)) {
      rule.enforcement = *v;
    }
  }
  if (node["onDrift"]) {
    if (auto v =
            ParseEnumAt(node["onDrift"], path + ".onDrift", kDriftRows, "drift action", problems)) {
      rule.on_drift = *v;
    }
  }
  if (rule.co_tenancy == CoTenancy::kNone &&
      (rule.Allows(SharingMode::kShared) || rule.Allows(SharingMode::kMps))) {
    problems.Add(path, node,
                 "coTenancy \"none\" contradicts the sharing modes shared/mps; accepted: "
                 "coTenancy none with modes from exclusive, mig, or another coTenancy");
  }
}

void ParseTiers(const YAML::Node& node, Policy& policy, Problems& problems) {
  if (!CheckMap(node, "tiers", {"team", "department", "customer", "regulated"}, problems)) return;
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) continue;
    auto tier = ParseTrustTier(kv.first.Scalar());
    if (!tier.ok()) continue;  // reported by CheckMap
    ParseTierRule(kv.second, "tiers." + kv.first.Scalar(),
                  policy.tiers[static_cast<std::size_t>(*tier)], problems);
  }
}

void ParseQuotas(const YAML::Node& node, Policy& policy, Problems& problems) {
  if (!CheckMap(node, "quotas", {}, problems)) return;
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) continue;
    const std::string ns = kv.first.Scalar();
    const std::string path = "quotas." + ns;
    if (!IsDnsLabel(ns)) {
      problems.Add(path, kv.first, "\"" + QuoteForMessage(ns) + "\" " + std::string(kDnsLabelForm));
      continue;
    }
    const YAML::Node q = kv.second;
    if (!CheckMap(q, path, {"gpuMemory", "gpuCores", "gpus"}, problems)) continue;
    if (q.size() == 0) {
      problems.Add(path, q, "is empty; accepted: one or more of gpuMemory, gpuCores, gpus");
      continue;
    }
    Quota quota;
    if (q["gpuMemory"]) {
      if (auto text = Scalar(q["gpuMemory"], path + ".gpuMemory", "accepted: a quantity (64Gi)",
                             problems)) {
        auto bytes = ParseQuantity(*text);
        Report(bytes, path + ".gpuMemory", q["gpuMemory"], problems);
        if (bytes.ok()) quota.gpu_memory_bytes = *bytes;
      }
    }
    if (q["gpuCores"]) {
      if (auto text = Scalar(q["gpuCores"], path + ".gpuCores",
                             "accepted: percent of one GPU (400 or 400%)", problems)) {
        auto percent = ParsePercent(*text);
        Report(percent, path + ".gpuCores", q["gpuCores"], problems);
        if (percent.ok()) quota.gpu_cores_percent = *percent;
      }
    }
    if (q["gpus"]) {
      constexpr std::string_view kForm = "accepted: a whole number of GPUs (0 to 100000)";
      if (auto text = Scalar(q["gpus"], path + ".gpus", kForm, problems)) {
        auto count = ParsePercent(*text);  // same grammar: digits only
        if (!count.ok() || text->back() == '%' || *count > 100000) {
          problems.Add(
              path + ".gpus", q["gpus"],
              "\"" + QuoteForMessage(*text) + "\" is not a GPU count; " + std::string(kForm));
        } else {
          quota.gpus = *count;
        }
      }
    }
    policy.quotas[ns] = quota;
  }
}

void ParsePriorityClasses(const YAML::Node& node, Policy& policy, Problems& problems) {
  if (!CheckMap(node, "priorityClasses", {"latency-critical", "normal", "best-effort"}, problems)) {
    return;
  }
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) continue;
    auto priority = ParsePriorityClass(kv.first.Scalar());
    if (!priority.ok()) continue;  // reported by CheckMap
    const std::string path = "priorityClasses." + kv.first.Scalar();
    auto text = Scalar(kv.second, path, "accepted: a Kubernetes PriorityClass name", problems);
    if (!text) continue;
    if (!IsDnsSubdomain(*text)) {
      problems.Add(path, kv.second,
                   "\"" + QuoteForMessage(*text) +
                       "\" is not a PriorityClass name; accepted: lower-case letters, digits, "
                       "'-' and '.', at most 253");
      continue;
    }
    policy.priority_classes[static_cast<std::size_t>(*priority)] = *text;
  }
}

// Valid but weaker than the seed's decision framework: reported, not refused.
void AddWarnings(Policy& policy) {
  const auto& customer = policy.Rule(TrustTier::kCustomer);
  if (customer.co_tenancy == CoTenancy::kAny || customer.co_tenancy == CoTenancy::kSameTier) {
    policy.warnings.push_back(
        "tiers.customer.coTenancy lets a customer share a GPU with another namespace; the "
        "decision framework keeps paying customers on their own GPUs (same-namespace or none)");
  }
  const auto& regulated = policy.Rule(TrustTier::kRegulated);
  if (regulated.Allows(SharingMode::kShared) || regulated.Allows(SharingMode::kMps)) {
    policy.warnings.push_back(
        "tiers.regulated.modes allows software sharing (shared/mps); regulated workloads "
        "should get dedicated GPUs or MIG");
  }
  for (const auto& row : kTrustTiers) {
    const auto& rule = policy.Rule(row.value);
    if (row.value != TrustTier::kTeam && rule.Allows(SharingMode::kMps) &&
        rule.co_tenancy != CoTenancy::kSameNamespace && rule.co_tenancy != CoTenancy::kNone) {
      policy.warnings.push_back("tiers." + std::string(row.name) +
                                " allows mps across namespaces: MPS clients share one fault "
                                "domain (one client's fatal fault ends the others)");
    }
  }
}

}  // namespace

StatusOr<Policy> ParsePolicy(std::string_view yaml) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(
        "the policy file is not valid YAML (line " + std::to_string(e.mark.line + 1) + ", column " +
        std::to_string(e.mark.column + 1) + "): " + e.msg + "; nothing was applied");
  }
  Policy policy = DefaultPolicy();
  Problems problems;
  try {
    if (!CheckMap(root, "(document)",
                  {"version", "tierAssignment", "tiers", "quotas", "priorityClasses"}, problems)) {
      return problems.ToStatus();
    }
    const YAML::Node version = root["version"];
    if (!version) {
      problems.Add("version", version, "is missing; accepted: v1");
    } else if (!version.IsScalar() || version.Scalar() != "v1") {
      problems.Add("version", version, "is " + Quoted(version) + "; accepted: v1");
    }
    if (root["tierAssignment"]) ParseTierAssignment(root["tierAssignment"], policy, problems);
    if (root["tiers"]) ParseTiers(root["tiers"], policy, problems);
    if (root["quotas"]) ParseQuotas(root["quotas"], policy, problems);
    if (root["priorityClasses"]) ParsePriorityClasses(root["priorityClasses"], policy, problems);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(std::string("the policy file could not be read: ") + e.what());
  }
  if (!problems.empty()) return problems.ToStatus();
  AddWarnings(policy);
  return policy;
}

StatusOr<Policy> LoadPolicyFile(const std::string& path) {
  // A policy of thousands of namespaces is some hundreds of kilobytes; past this bound a file is
  // refused at once instead of parsed (YAML takes ~70 times a file's size in memory).
  constexpr std::size_t kMaxPolicyBytes = std::size_t{4} << 20;
  auto text = ReadFile(path, kMaxPolicyBytes);
  if (!text.ok()) return text.status().WithContext("policy file");
  auto policy = ParsePolicy(*text);
  if (!policy.ok()) return AsInputError(policy.status().WithContext(path));
  return policy;
}

namespace {

std::string ModesText(const TierRule& rule) {
  std::string out;
  for (SharingMode m : rule.modes) out += (out.empty() ? "" : ", ") + std::string(Name(m));
  return out;
}

}  // namespace

std::string ExplainPolicy(const Policy& policy) {
  std::ostringstream out;
  out << "Policy v1: valid.\n\nHow a namespace gets its tier:\n";
  for (const auto& [ns, tier] : policy.namespaces) {
    out << "  namespace " << ns << " -> " << Name(tier) << "\n";
  }
  if (policy.honor_namespace_label) {
    out << "  other namespaces: their " << names::kLabelTrust
        << " label if set (only cluster administrators can label namespaces)\n";
  }
  out << "  otherwise: " << Name(policy.default_tier) << "\n\nWhat each tier may do:\n";
  for (const auto& row : kTrustTiers) {
    const TierRule& rule = policy.Rule(row.value);
    out << "  " << row.name << (rule.from_file ? "" : " (built-in default)") << "\n"
        << "    modes:       " << ModesText(rule) << "\n"
        << "    co-tenancy:  " << Name(rule.co_tenancy) << " - "
        << MeaningIn(kCoTenancyRows, rule.co_tenancy) << "\n"
        << "    enforcement: " << Name(rule.enforcement) << " - "
        << MeaningIn(kEnforcementRows, rule.enforcement) << "\n"
        << "    on drift:    " << Name(rule.on_drift) << " - "
        << MeaningIn(kDriftRows, rule.on_drift) << "\n";
  }
  out << "\nQuotas:\n";
  if (policy.quotas.empty()) out << "  none\n";
  for (const auto& [ns, q] : policy.quotas) {
    out << "  " << ns << ":";
    if (q.gpu_memory_bytes) out << " GPU memory " << FormatQuantity(*q.gpu_memory_bytes);
    if (q.gpu_cores_percent) out << " compute " << *q.gpu_cores_percent << "%";
    if (q.gpus) out << " whole GPUs " << *q.gpus;
    out << "\n";
  }
  out << "\nPriority classes (tessera -> Kubernetes PriorityClass):\n";
  for (const auto& row : kPriorityClasses) {
    out << "  " << row.name << " -> " << policy.KubernetesPriorityClass(row.value) << "\n";
  }
  if (!policy.warnings.empty()) {
    out << "\nWarnings (valid, but weaker than the decision framework advises):\n";
    for (const auto& w : policy.warnings) out << "  - " << w << "\n";
  }
  return out.str();
}

std::string PolicyToJson(const Policy& policy) {
  nlohmann::ordered_json j;
  j["version"] = "v1";
  j["tierAssignment"]["defaultTier"] = Name(policy.default_tier);
  j["tierAssignment"]["honorNamespaceLabel"] = policy.honor_namespace_label;
  j["tierAssignment"]["namespaces"] = nlohmann::ordered_json::object();
  for (const auto& [ns, tier] : policy.namespaces) {
    j["tierAssignment"]["namespaces"][ns] = Name(tier);
  }
  for (const auto& row : kTrustTiers) {
    const TierRule& rule = policy.Rule(row.value);
    auto& t = j["tiers"][std::string(row.name)];
    t["modes"] = nlohmann::ordered_json::array();
    for (SharingMode m : rule.modes) t["modes"].push_back(Name(m));
    t["coTenancy"] = Name(rule.co_tenancy);
    t["enforcement"] = Name(rule.enforcement);
    t["onDrift"] = Name(rule.on_drift);
    t["source"] = rule.from_file ? "file" : "default";
  }
  j["quotas"] = nlohmann::ordered_json::object();
  for (const auto& [ns, q] : policy.quotas) {
    auto& o = j["quotas"][ns];
    o = nlohmann::ordered_json::object();
    if (q.gpu_memory_bytes) o["gpuMemoryBytes"] = *q.gpu_memory_bytes;
    if (q.gpu_cores_percent) o["gpuCores"] = *q.gpu_cores_percent;
    if (q.gpus) o["gpus"] = *q.gpus;
  }
  for (const auto& row : kPriorityClasses) {
    j["priorityClasses"][std::string(row.name)] = policy.KubernetesPriorityClass(row.value);
  }
  j["warnings"] = policy.warnings;
  return j.dump(2);
}

}  // namespace tessera::policy
