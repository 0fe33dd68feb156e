// `tessera advise`: the seeds' trust-level decision framework as code. Given a trust tier, a GPU
// model, a workload mix and whether vGPU licences exist, it recommends sharing modes with the
// reasons, and says what tessera enforces in each mode and what it cannot.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/model.h"
#include "tessera/status.h"

#include "policy/policy.h"

namespace tessera::advise {

struct GpuModel {
  std::string_view name;
  std::uint32_t memory_gib;
  std::uint32_t mig_max_instances;  // 0: no MIG
};

// Case-insensitive; spaces, '_' and '-' are interchangeable ("RTX PRO 6000", "rtx-pro-6000").
StatusOr<GpuModel> FindGpuModel(std::string_view text);
std::string AcceptedGpuModels();
const std::vector<GpuModel>& AllGpuModels();

#define TESSERA_WORKLOADS(X)                               \
  X(kInference, "inference", "latency-critical inference") \
  X(kTraining, "training", "training")                     \
  X(kBatch, "batch", "batch and preprocessing jobs")

enum class Workload : std::uint8_t {
#define TESSERA_WORKLOAD_ENUM(name, text, meaning) name,
  TESSERA_WORKLOADS(TESSERA_WORKLOAD_ENUM)
#undef TESSERA_WORKLOAD_ENUM
};

// "inference,training" -> {kInference, kTraining}. Duplicates are folded; empty is an error.
StatusOr<std::vector<Workload>> ParseWorkloads(std::string_view text);

// The ways a GPU can be shared that the advice weighs: tessera's modes plus vGPU, which
// tessera does not provide (VM-level isolation below Kubernetes).
#define TESSERA_OPTIONS(X)   \
  X(kShared, "shared")       \
  X(kMps, "mps")             \
  X(kMig, "mig")             \
  X(kExclusive, "exclusive") \
  X(kVgpu, "vgpu")

enum class Option : std::uint8_t {
#define TESSERA_OPTION_ENUM(name, text) name,
  TESSERA_OPTIONS(TESSERA_OPTION_ENUM)
#undef TESSERA_OPTION_ENUM
};
std::string_view Name(Option option);

struct Request {
  TrustTier tier = TrustTier::kTeam;
  std::optional<GpuModel> gpu;
  std::vector<Workload> workloads;  // empty: unknown mix
  bool vgpu_licensed = false;
  const policy::Policy* policy = nullptr;  // when given, advice respects it
};

struct Recommendation {
  Option option;
  std::vector<std::string> reasons;
  std::vector<std::string> enforces;  // what tessera enforces in this mode
  std::vector<std::string> cannot;    // what it cannot
};

struct RuledOut {
  Option option;
  std::string reason;
};

struct ComparisonRow {
  std::string_view option;
  std::string_view isolation;
  std::string_view performance;
  std::string_view complexity;
  std::string_view hardware;
};
const std::vector<ComparisonRow>& ComparisonTable();

struct Advice {
  Request request;
  std::vector<Recommendation> recommended;  // best first; never empty
  std::vector<RuledOut> ruled_out;
  std::vector<std::string> notes;
};

Advice Advise(const Request& request);

std::string RenderText(const Advice& advice);
std::string RenderJson(const Advice& advice);

}  // namespace tessera::advise
