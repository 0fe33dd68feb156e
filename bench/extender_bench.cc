// The extender's filter + prioritize on a request naming every node as kube-scheduler sends it
// (nodeCacheCapable: the Pod object and the node names, JSON over HTTP), at 1,000 and 5,000
// nodes (issue #26). Measured from the request body to the answer body, HTTP transport
// excluded; each iteration's reservation is rolled back so the cluster state is the same for
// every decision.
//
// The cluster: N nodes x 8 GPUs of 141 GiB, about half full of fractional pods of mixed sizes
// (8 per node, each filtered on its node alone, so the fill costs O(N), then bound through the
// real verbs). The pod placed: 10 GiB + 20 % compute.
//
// Baseline in the same run (BM_JsonRoundTripOnly): parsing the same request and writing an
// answer that names all N nodes, without any placement -- the floor any JSON extender pays.
// The counters p50_us / p99_us are over the iterations.
#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "contract/contract_testing.h"
#include "extender/extender.h"

namespace tessera::extender {
namespace {

using contract::GenerateSigningKeyPem;
using contract::Signer;

using nlohmann::json;
constexpr std::uint64_t kGiB = 1ULL << 30;

class NullWriter : public PodWriter {
 public:
  Status Bind(const std::string&, const std::string&, const std::string&, const std::string&,
              const std::map<std::string, std::string>&) override {
    return Status::Ok();
  }
  StatusOr<std::string> NodeNameOf(const std::string&, const std::string&,
                                   const std::string&) override {
    return std::string();
  }
};

std::vector<std::string> NodeNames(int nodes) {
  std::vector<std::string> names;
  for (int i = 0; i < nodes; ++i) names.push_back("gpu-node-" + std::to_string(i));
  return names;
}

// The request body kube-scheduler would send.
std::string RequestBody(const std::vector<std::string>& names) {
  json pod = contract::testing::FractionalPod("bench", "10Gi", "20");
  pod["metadata"]["labels"] = {{"app", "inference"}, {"team", "ml"}};
  pod["spec"]["containers"][0]["env"] = json::array({{{"name", "A"}, {"value", "1"}}});
  return json{{"Pod", pod}, {"NodeNames", names}}.dump();
}

void Record(benchmark::State& state, std::vector<double>& micros) {
  std::sort(micros.begin(), micros.end());
  if (micros.empty()) return;
  state.counters["p50_us"] = micros[micros.size() / 2];
  state.counters["p99_us"] = micros[std::min(micros.size() - 1, micros.size() * 99 / 100)];
}

void BM_FilterPrioritize(benchmark::State& state) {
  const auto kind = static_cast<placement::PolicyKind>(state.range(0));
  const auto node_count = static_cast<int>(state.range(1));
  LedgerOptions options;
  options.placement = kind;
  Ledger ledger(policy::DefaultPolicy(), options, Clock::Real());
  NullWriter writer;
  auto signer = Signer::FromPem(*GenerateSigningKeyPem());
  Extender extender(&ledger, &writer, &*signer, "bench", [] { return 0; });
  extender.SetSynced(true);
  const std::vector<std::string> names = NodeNames(node_count);
  for (const std::string& n : names)
    ledger.UpsertNode(contract::testing::MakeNode(n, 8, 141 * kGiB));
  // Fill to about half with mixed fractional pods, bound through the real verbs.
  std::mt19937 rng(42);
  for (int i = 0; i < node_count * 8; ++i) {
    json pod = contract::testing::FractionalPod("fill-" + std::to_string(i),
                                                std::to_string(20 + rng() % 100) + "Gi",
                                                std::to_string(10 + rng() % 40));
    const json one = json::array({names[static_cast<std::size_t>(i / 8)]});
    json f = extender.Filter({{"Pod", pod}, {"NodeNames", one}});
    if (f["NodeNames"].empty()) continue;
    (void)extender.Bind({{"PodName", pod["metadata"]["name"]},
                         {"PodNamespace", "default"},
                         {"PodUID", pod["metadata"]["uid"]},
                         {"Node", f["NodeNames"][0]}});
  }
  const std::string body = RequestBody(names);
  std::vector<double> micros;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const json args = json::parse(body);
    const std::string filter = extender.Filter(args).dump();
    // kube-scheduler sends prioritize only the nodes filter kept.
    json kept = json::parse(filter)["NodeNames"];
    const std::string prioritize =
        extender.Prioritize({{"Pod", args["Pod"]}, {"NodeNames", kept}}).dump();
    const auto t1 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(prioritize);
    micros.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    state.PauseTiming();
    if (!kept.empty()) {
      (void)ledger.BeginBind("uid-bench", kept[0]);
      ledger.FinishBind("uid-bench", false);  // roll back: the same state next time
    }
    state.ResumeTiming();
  }
  state.SetLabel(std::string(placement::Name(kind)) + " " + std::to_string(node_count) + " nodes");
  Record(state, micros);
}
BENCHMARK(BM_FilterPrioritize)
    ->ArgsProduct({{static_cast<int>(placement::PolicyKind::kBestFit),
                    static_cast<int>(placement::PolicyKind::kTessera)},
                   {1000, 5000}})
    ->ArgNames({"policy", "nodes"})
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(2000);

void BM_JsonRoundTripOnly(benchmark::State& state) {
  const std::vector<std::string> names = NodeNames(static_cast<int>(state.range(0)));
  const std::string body = RequestBody(names);
  std::vector<double> micros;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const json args = json::parse(body);
    const std::string answer = json{
        {"NodeNames", args["NodeNames"]},
        {"FailedNodes", json::object()},
        {"Error", ""}}.dump();
    const auto t1 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(answer);
    micros.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  Record(state, micros);
}
BENCHMARK(BM_JsonRoundTripOnly)
    ->Arg(1000)
    ->Arg(5000)
    ->ArgName("nodes")
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(2000);

}  // namespace
}  // namespace tessera::extender

BENCHMARK_MAIN();
