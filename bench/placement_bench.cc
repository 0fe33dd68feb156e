// One placement decision (filter + score + GPU choice) on the Alibaba cluster, 1,213 nodes, and
// on that cluster made k times larger (issue #26): the node list copied k times and the pod list
// with it (sim/scale.h, as `tessera sim --scale K`), k = 3, 5, 10 (3,639, 6,065 and 12,130
// nodes). Each benchmark replays the default trace's arrivals (tuned to 130 % of the cluster's
// GPU capacity, seed 42) and times every decision; the counters p50_us / p99_us / max_us are over
// all decisions of the replay, which covers the empty, filling and saturated cluster.
// peak_rss_mib is the process's VmHWM after the replay: run one benchmark per process
// (--benchmark_filter) to read it per configuration (bench/scale_curve.py does, interleaved).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "placement/scheduler.h"
#include "sim/replay.h"
#include "sim/scale.h"
#include "sim/trace.h"
#include "sim/workload.h"

namespace tessera::sim {
namespace {

const std::vector<placement::Node>& BaseNodes() {
  static const auto* nodes = new std::vector<placement::Node>(
      LoadNodeCsv(std::string(TESSERA_TRACE_DATA) + "/openb_node_list_gpu_node.csv").value());
  return *nodes;
}

const std::vector<TracePod>& BasePods() {
  static const auto* pods = new std::vector<TracePod>(
      LoadPodCsv(std::string(TESSERA_TRACE_DATA) + "/openb_pod_list_default.csv").value());
  return *pods;
}

// The process's peak resident set (VmHWM), MiB; 0 if /proc is not there.
double PeakRssMib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024;
  }
  return 0;
}

void BM_PlacementDecision(benchmark::State& state) {
  const auto kind = static_cast<placement::PolicyKind>(state.range(0));
  const auto scale = static_cast<int>(state.range(1));
  auto nodes = ScaleNodes(BaseNodes(), scale);
  auto pods = ScalePods(BasePods(), scale);
  if (!nodes.ok() || !pods.ok()) {
    state.SkipWithError("cannot scale the trace");
    return;
  }
  auto input = MakeSimInput(*std::move(nodes), *std::move(pods), "default");
  if (!input.ok()) {
    state.SkipWithError(input.status().ToString().c_str());
    return;
  }
  const std::size_t node_count = input->cluster.size();
  std::vector<double> micros;
  double classes_sum = 0;  // node classes after each decision (sum over the replay)
  std::size_t classes_max = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto rand = MakeRand(RngKind::kStd, 42).value();
    placement::Cluster cluster = input->cluster;
    const Workload w =
        GenerateWorkload(input->pods, cluster.size(), cluster.total_gpu_milli(), *rand);
    std::vector<placement::Request> requests;
    for (const TracePod& p : w.pods) requests.push_back(ToRequest(p));
    auto policy = placement::MakePolicy(kind, cluster, input->typical, rand.get());
    placement::Scheduler scheduler(&cluster, policy.get(), w.ranks);
    micros.clear();
    micros.reserve(w.arrival.size());
    classes_sum = 0;
    classes_max = 0;
    state.ResumeTiming();
    for (const std::uint32_t idx : w.arrival) {
      const auto t0 = std::chrono::steady_clock::now();
      auto placed = scheduler.Place(requests[idx]);
      const auto t1 = std::chrono::steady_clock::now();
      benchmark::DoNotOptimize(placed);
      micros.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      classes_sum += static_cast<double>(scheduler.classes());
      classes_max = std::max(classes_max, scheduler.classes());
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
  state.counters["nodes"] = static_cast<double>(node_count);
  state.counters["classes_mean"] =
      micros.empty() ? 0.0 : classes_sum / static_cast<double>(micros.size());
  state.counters["classes_max"] = static_cast<double>(classes_max);
  state.counters["peak_rss_mib"] = PeakRssMib();
  state.SetLabel(std::string(placement::Name(kind)) + " " + std::to_string(node_count) + " nodes");
}

// Every policy on the trace's cluster; FGD, Best-fit and tessera on the larger ones (k = 3, 5,
// 10). Random is not cacheable: it filters every node at every decision.
void Args(benchmark::internal::Benchmark* b) {
  for (int kind = 0; kind <= static_cast<int>(placement::PolicyKind::kTessera); ++kind) {
    b->Args({kind, 1});
  }
  for (const int scale : {3, 5, 10}) {
    for (const auto kind : {placement::PolicyKind::kBestFit, placement::PolicyKind::kFgd,
                            placement::PolicyKind::kTessera}) {
      b->Args({static_cast<int>(kind), scale});
    }
  }
  b->ArgNames({"policy", "scale"})->Iterations(1)->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_PlacementDecision)->Apply(Args);

}  // namespace
}  // namespace tessera::sim

BENCHMARK_MAIN();
