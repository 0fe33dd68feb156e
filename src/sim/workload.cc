#include "sim/workload.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "sim/go_source.h"

namespace tessera::sim {

StatusOr<std::unique_ptr<placement::Rand>> MakeRand(RngKind kind, std::int64_t seed) {
  if (kind == RngKind::kGo) {
    if (!GoSourceAvailable()) {
      return FailedPreconditionError(
          "--rng go: this build has no Go math/rand table (Go was not found when tessera was "
          "configured); use --rng std, or install Go and re-run cmake");
    }
    return std::make_unique<placement::Rand>(std::make_unique<GoSource>(seed));
  }
  return std::make_unique<placement::Rand>(
      std::make_unique<placement::SplitMixSource>(static_cast<std::uint64_t>(seed)));
}

Workload GenerateWorkload(std::vector<TracePod> pods, std::size_t node_count,
                          std::int64_t capacity_milli, placement::Rand& rand,
                          const WorkloadOptions& options) {
  Workload w;
  std::sort(pods.begin(), pods.end(),
            [](const TracePod& a, const TracePod& b) { return a.name < b.name; });
  w.pods = std::move(pods);
  const auto n = static_cast<int>(w.pods.size());

  (void)rand.Int63();  // an unused draw in the original (a debug-log argument)
  w.arrival.resize(w.pods.size());
  for (std::size_t i = 0; i < w.arrival.size(); ++i) w.arrival[i] = static_cast<std::uint32_t>(i);
  if (options.shuffle) {
    rand.Shuffle(n, [&](int i, int j) {
      std::swap(w.arrival[static_cast<std::size_t>(i)], w.arrival[static_cast<std::size_t>(j)]);
    });
  }

  std::int64_t total = 0;
  for (const TracePod& p : w.pods) total += p.total_milli();
  const double target = options.tune * static_cast<double>(capacity_milli);
  if (static_cast<double>(total) < target) {
    // Tune up: append clones of pods drawn (from the name-sorted originals) until one would
    // cross the target. The check uses the per-GPU milli, as the original does.
    while (true) {
      const auto idx = static_cast<std::size_t>(rand.Intn(n));
      const TracePod& cand = w.pods[idx];
      if (static_cast<double>(total + cand.gpu_milli) > target) break;
      w.arrival.push_back(static_cast<std::uint32_t>(idx));
      total += cand.total_milli();
    }
  } else {
    // Tune down: drop random arrivals until the total is within the target.
    while (static_cast<double>(total) > target && !w.arrival.empty()) {
      const auto idx = static_cast<std::size_t>(rand.Intn(static_cast<int>(w.arrival.size())));
      total -= w.pods[w.arrival[idx]].total_milli();
      w.arrival.erase(w.arrival.begin() + static_cast<std::ptrdiff_t>(idx));
    }
  }
  w.originals = std::min(w.pods.size(), w.arrival.size());
  w.requested_milli = total;

  for (int i = 0; i < options.skip_after_tuning; ++i) (void)rand.Int63();
  const std::vector<int> perm = rand.Perm(static_cast<int>(node_count));
  w.ranks.assign(perm.begin(), perm.end());
  return w;
}

placement::WorkloadProfile TypicalPods(const std::vector<TracePod>& pods, int popularity_percent) {
  using Key = std::tuple<std::int64_t, std::int32_t, std::uint32_t, std::string>;
  std::map<Key, std::size_t> counts;
  std::map<Key, std::vector<std::string>> models;
  for (const TracePod& p : pods) {
    const bool gpu = p.num_gpu > 0;
    Key key{p.cpu_milli, gpu ? p.gpu_milli : 0, gpu ? p.num_gpu : 0U, gpu ? p.spec_key : ""};
    if (++counts[key] == 1) models[key] = gpu ? p.models : std::vector<std::string>{};
  }
  std::vector<std::pair<Key, std::size_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    if (a.second != b.second) return a.second > b.second;
    return a.first > b.first;  // cpu, milli, count, spec string: all descending
  });
  const auto total = static_cast<double>(pods.size());
  const double need = static_cast<double>(popularity_percent) * total / 100;
  std::size_t cum = 0;
  std::size_t taken = 0;
  while (taken < sorted.size() && static_cast<double>(cum) < need) cum += sorted[taken++].second;
  placement::WorkloadProfile profile;
  for (std::size_t i = 0; i < taken; ++i) {
    const Key& key = sorted[i].first;
    placement::WorkloadProfile::Item item;
    item.cpu_milli = std::get<0>(key);
    item.gpu_milli = std::get<1>(key);
    item.gpu_count = std::get<2>(key);
    item.models = models[key];
    item.weight =
        (static_cast<double>(sorted[i].second) / total) / (static_cast<double>(cum) / total);
    profile.items.push_back(std::move(item));
  }
  return profile;
}

}  // namespace tessera::sim
