// Multi-GPU-heavy pod lists derived from the bundled ones, deterministically, for testing
// placement policies on mixes the bundled lists do not cover (issue #26; docs/sim.md,
// test/placement-variants/recipe.txt). A recipe names each variant: its family, the list it is
// derived from, the multi-GPU share of its GPU milli, a generator seed, and whether it is used
// for tuning or held out.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/status.h"

#include "sim/trace.h"

namespace tessera::sim {

enum class VariantFamily : std::uint8_t {
  // The base list's CPU-only and single-GPU pods resampled with replacement (as many as it has),
  // plus its multi-GPU pods resampled until they bring `share` of the list's GPU milli.
  kResample,
  // As kResample, but a multi-GPU pod is drawn with weight (GPU count)^tilt.
  kSkew,
  // Pods drawn one at a time until the list asks for `total` x the cluster's GPU milli; the
  // multi-GPU share of the GPU milli moves linearly from `share` to `to` along the list (by
  // cumulative GPU milli). Pod names follow the list's order: replay with --order name.
  kShift,
};

struct VariantSpec {
  std::string name;  // [a-z0-9-]+; the list is openb_pod_list_<name>.csv
  VariantFamily family = VariantFamily::kResample;
  std::string base;  // a pod list of the trace folder: "default", "cpu050", ...
  double share = 0;  // multi-GPU share of the GPU milli (kShift: at the start)
  double to = 0;     // kShift: the share at the end
  double tilt = 0;   // kSkew: weight exponent of the GPU count
  double total = 0;  // kShift: GPU milli asked for, x the cluster's capacity
  std::uint64_t seed = 0;
  bool held_out = false;  // false: a tuning variant

  // Pods arrive in name order (kShift), not shuffled.
  bool ordered() const { return family == VariantFamily::kShift; }
};

std::string_view Name(VariantFamily family);

// The recipe: one variant a line,
//   NAME FAMILY base=LIST share=X [to=X] [tilt=X] [total=X] seed=N set=tuning|held-out
// '#' starts a comment. Errors are kInvalidInput and name FILE:LINE and the field.
StatusOr<std::vector<VariantSpec>> ParseRecipe(std::string_view text, std::string_view file);

// The variant's pods (a pure function of the spec, the base list and the capacity).
// `capacity_milli`: the cluster's GPU milli (kShift's total). Fails (kInvalidInput) if the base
// list has no single-GPU or no multi-GPU pod to draw from.
StatusOr<std::vector<TracePod>> MakeVariant(const VariantSpec& spec,
                                            const std::vector<TracePod>& base,
                                            std::int64_t capacity_milli);

// Share of the GPU milli that pods of two or more GPUs ask for.
double MultiGpuShare(const std::vector<TracePod>& pods);

// The pods as a pod list (`name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec`).
std::string PodCsv(const std::vector<TracePod>& pods);

}  // namespace tessera::sim
