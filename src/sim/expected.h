// The authors' published results (experiments/analysis/expected_results/analysis_*_discrete.csv
// of hkust-adsl/kubernetes-scheduler-simulator): one row per (workload, policy, seed).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessera/status.h"

namespace tessera::sim {

struct PublishedRow {
  std::string workload;   // "openb_pod_list_default"
  std::string sc_policy;  // "06-FGD"
  std::int64_t seed = 0;
  std::vector<std::optional<double>> columns;  // 0..130; empty cells are nullopt
};

StatusOr<std::vector<PublishedRow>> LoadPublishedCsv(const std::string& path);

}  // namespace tessera::sim
