// The whole experiment grid on one trace: the 6 published policies and tessera's, x 10 seeds
// (42..51) of the default trace, run on `threads` threads (the acceptance target: < 60 s on a
// 2-core machine).
#include <atomic>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "sim/go_source.h"
#include "sim/replay.h"
#include "sim/trace.h"

namespace tessera::sim {
namespace {

void BM_SevenPoliciesTenSeeds(benchmark::State& state) {
  const auto threads = static_cast<unsigned>(state.range(0));
  auto nodes = LoadNodeCsv(std::string(TESSERA_TRACE_DATA) + "/openb_node_list_gpu_node.csv");
  auto pods = LoadPodCsv(std::string(TESSERA_TRACE_DATA) + "/openb_pod_list_default.csv");
  if (!nodes.ok() || !pods.ok()) {
    state.SkipWithError("trace data missing");
    return;
  }
  auto input = MakeSimInput(std::move(nodes).value(), std::move(pods).value(), "default");
  if (!input.ok()) {
    state.SkipWithError(input.status().ToString().c_str());
    return;
  }
  constexpr int kRuns = 10 * (static_cast<int>(placement::PolicyKind::kTessera) + 1);
  RunOptions options;
  options.rng = GoSourceAvailable() ? RngKind::kGo : RngKind::kStd;
  for (auto _ : state) {
    std::atomic<int> next{0};
    std::atomic<int> failures{0};
    auto work = [&] {
      for (int j = next++; j < kRuns; j = next++) {
        auto r =
            RunExperiment(*input, static_cast<placement::PolicyKind>(j / 10), 42 + j % 10, options);
        if (!r.ok()) ++failures;
      }
    };
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    if (failures > 0) state.SkipWithError("a run failed");
  }
  state.counters["runs"] = kRuns;
}
BENCHMARK(BM_SevenPoliciesTenSeeds)
    ->Arg(1)
    ->Arg(2)
    ->Iterations(1)
    ->Unit(benchmark::kSecond)
    ->UseRealTime();

}  // namespace
}  // namespace tessera::sim

BENCHMARK_MAIN();
