// One placement decision (filter + score + GPU choice) on the Alibaba cluster, 1,213 nodes, and
// on the same node mix scaled to 5k and 20k nodes. Each benchmark replays the default trace's
// arrivals (tuned to 130 % of that cluster's GPU capacity, seed 42) and times every decision;
// the counters p50_us / p99_us / max_us are over all decisions of the replay, which covers the
// empty, filling and saturated cluster.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <benchmark/benchmark.h>

#include "placement/scheduler.h"
#include "sim/replay.h"
#include "sim/trace.h"
#include "sim/workload.h"

namespace tessera::sim {
namespace {

std::vector<placement::Node> ScaledNodes(std::size_t count) {
  auto base = LoadNodeCsv(std::string(TESSERA_TRACE_DATA) + "/openb_node_list_gpu_node.csv");
  if (!base.ok()) return {};
  std::vector<placement::Node> nodes;
  for (std::size_t i = 0; i < count; ++i) {
    placement::Node n = (*base)[i % base->size()];
    n.name = "node-" + std::to_string(i);
    nodes.push_back(std::move(n));
  }
  return nodes;
}

const std::vector<TracePod>& Pods() {
  static const auto* pods = new std::vector<TracePod>(
      LoadPodCsv(std::string(TESSERA_TRACE_DATA) + "/openb_pod_list_default.csv").value());
  return *pods;
}

void BM_PlacementDecision(benchmark::State& state) {
  const auto kind = static_cast<placement::PolicyKind>(state.range(0));
  const auto node_count = static_cast<std::size_t>(state.range(1));
  auto input = MakeSimInput(ScaledNodes(node_count), Pods(), "default");
  if (!input.ok()) {
    state.SkipWithError(input.status().ToString().c_str());
    return;
  }
  std::vector<double> micros;
  for (auto _ : state) {
    state.PauseTiming();
    auto rand = MakeRand(RngKind::kStd, 42).value();
    placement::Cluster cluster = input->cluster;
    const Workload w = GenerateWorkload(Pods(), cluster.size(), cluster.total_gpu_milli(), *rand);
    std::vector<placement::Request> requests;
    for (const TracePod& p : w.pods) requests.push_back(ToRequest(p));
    auto policy = placement::MakePolicy(kind, cluster, input->typical, rand.get());
    placement::Scheduler scheduler(&cluster, policy.get(), w.ranks);
    micros.clear();
    micros.reserve(w.arrival.size());
    state.ResumeTiming();
    for (const std::uint32_t idx : w.arrival) {
      const auto t0 = std::chrono::steady_clock::now();
      auto placed = scheduler.Place(requests[idx]);
      const auto t1 = std::chrono::steady_clock::now();
      benchmark::DoNotOptimize(placed);
      micros.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
  }
  std::sort(micros.begin(), micros.end());
  auto at = [&](double q) {
    return micros.empty()
               ? 0.0
               : micros[static_cast<std::size_t>(q * static_cast<double>(micros.size() - 1))];
  };
  state.counters["decisions"] = static_cast<double>(micros.size());
  state.counters["p50_us"] = at(0.50);
  state.counters["p99_us"] = at(0.99);
  state.counters["max_us"] = micros.empty() ? 0.0 : micros.back();
  state.SetLabel(std::string(placement::Name(kind)) + " " + std::to_string(node_count) + " nodes");
}

void Args(benchmark::internal::Benchmark* b) {
  for (const int nodes : {1213, 5000, 20000}) {
    for (int kind = 0; kind <= static_cast<int>(placement::PolicyKind::kTessera); ++kind) {
      b->Args({kind, nodes});
    }
  }
  b->Iterations(1)->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_PlacementDecision)->Apply(Args);

}  // namespace
}  // namespace tessera::sim

BENCHMARK_MAIN();
