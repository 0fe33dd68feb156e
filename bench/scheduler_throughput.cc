// End-to-end scheduling throughput on the real control plane (test/e2e/harness), 100 simulated
// nodes x 8 GPUs of 141 GiB:
//   tessera:  kube-scheduler + tessera-scheduler (extender: filter reserves, bind writes the
//             signed decision and the Binding), N fractional pods (1-16 GiB, half with a
//             5-30 % compute share);
//   baseline: kube-scheduler alone (no extender), N whole-GPU pods (tessera.dev/gpu: 1, counted
//             by kube-scheduler's own NodeResourcesFit), in a fresh control plane.
// Both: N pods created from 16 threads as fast as the API server takes them; the clock runs
// from the first create to the moment every pod has spec.nodeName (polled every 50 ms).
// Prints one table row per run and the ratio.
//
// usage: TESSERA_TESTCLUSTER=build/e2e/tessera-testcluster scheduler_throughput [PODS] [RUNS]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include <httplib.h>

#include "contract/decision.h"
#include "e2e/scheduler_harness.h"
#include "e2e/testcluster.h"
#include "k8s/client.h"
#include "k8s/paths.h"

namespace tessera::extender {
namespace {

using contract::GenerateSigningKeyPem;
using contract::Signer;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kNodes = 100;
constexpr int kGpusPerNode = 8;

json PodObject(const std::string& name, std::map<std::string, std::string> limits) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec",
           {{"terminationGracePeriodSeconds", 0},
            {"containers",
             {{{"name", "main"},
               {"image", "registry.invalid/x:1"},
               {"resources", {{"limits", limits}}}}}}}}};
}

struct Result {
  int pods = 0;
  double seconds = 0;
  double create_seconds = 0;
};

StatusOr<Result> Run(bool with_tessera, int pods, int run) {
  auto folder = e2e::TempFolder::Create("tessera-throughput");
  if (!folder.ok()) return folder.status();
  const std::string dir = (*folder)->path();
  e2e::TestClusterOptions options;
  int port = 0;
  if (with_tessera) {
    port = k8s::FreeLoopbackPort();
    options.scheduler_config = dir + "/kube-scheduler.yaml";
    std::ofstream(options.scheduler_config) << scheduler::SchedulerConfig(port);
  }
  auto cluster = e2e::TestCluster::Start(options);
  if (!cluster.ok()) return cluster.status();
  e2e::SimNodesOptions sim;
  sim.kubeconfig = (*cluster)->kubeconfig();
  sim.nodes = kNodes;
  sim.gpus_per_node = kGpusPerNode;
  sim.gpu_memory = "141Gi";
  auto nodes = e2e::SimNodes::Start(sim);
  if (!nodes.ok()) return nodes.status();
  std::unique_ptr<e2e::ChildProcess> scheduler;
  if (with_tessera) {
    auto pem = GenerateSigningKeyPem();
    if (!pem.ok()) return pem.status();
    std::ofstream(dir + "/signing.pem") << *pem;
    e2e::SchedulerProcessOptions so;
    so.binary = TESSERA_SCHEDULER_BINARY;
    so.kubeconfig = (*cluster)->kubeconfig();
    so.port = port;
    so.signing_key = dir + "/signing.pem";
    so.dir = dir;
    so.tag = "0";
    auto child = e2e::StartTesseraScheduler(so);
    if (!child.ok()) return child.status();
    scheduler = std::move(*child);
  }
  auto kc = k8s::LoadKubeconfig((*cluster)->kubeconfig());
  if (!kc.ok()) return kc.status();
  kc->qps = 2000;
  kc->burst = 4000;
  auto api = k8s::Client::New(*kc);
  if (!api.ok()) return api.status();
  auto sa = (*api)->Create(
      "/api/v1/namespaces/default/serviceaccounts",
      json{{"apiVersion", "v1"}, {"kind", "ServiceAccount"}, {"metadata", {{"name", "default"}}}});
  if (!sa.ok() && sa.status().code() != StatusCode::kAlreadyExists) return sa.status();

  std::mt19937 rng(static_cast<unsigned>(1000 + run));
  std::vector<json> objects;
  for (int i = 0; i < pods; ++i) {
    std::map<std::string, std::string> limits;
    if (with_tessera) {
      limits["tessera.dev/gpu-memory"] = std::to_string(1 + rng() % 16) + "Gi";
      if (rng() % 2 == 0) limits["tessera.dev/gpu-cores"] = std::to_string(5 + rng() % 26);
    } else {
      limits["tessera.dev/gpu"] = "1";
    }
    objects.push_back(PodObject("p-" + std::to_string(i), limits));
  }
  std::atomic<int> failed{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      for (std::size_t i = static_cast<std::size_t>(t); i < objects.size(); i += 16) {
        if (!(*api)->Create(k8s::PodsPath("default"), objects[i]).ok()) ++failed;
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto created = Clock::now();
  if (failed.load() != 0) return InternalError(std::to_string(failed.load()) + " creates failed");
  const auto deadline = Clock::now() + std::chrono::minutes(5);
  while (true) {
    auto list = (*api)->List(k8s::PodsPath("default"));
    if (!list.ok()) return list.status();
    int bound = 0;
    for (const json& p : list->items) {
      bound += p.value("/spec/nodeName"_json_pointer, std::string()).empty() ? 0 : 1;
    }
    if (bound == pods) break;
    if (Clock::now() > deadline) {
      return InternalError("only " + std::to_string(bound) + " of " + std::to_string(pods) +
                           " pods bound after 5 minutes");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const auto done = Clock::now();
  if (with_tessera) {
    httplib::Client c("127.0.0.1", port);
    if (auto res = c.Get("/metrics")) {
      for (std::size_t at = 0;
           (at = res->body.find("tessera_scheduler_request", at)) != std::string::npos;) {
        const std::size_t end = res->body.find('\n', at);
        std::fprintf(stderr, "  %s\n", res->body.substr(at, end - at).c_str());
        at = end;
      }
    }
  }
  Result r;
  r.pods = pods;
  r.seconds = std::chrono::duration<double>(done - t0).count();
  r.create_seconds = std::chrono::duration<double>(created - t0).count();
  return r;
}

}  // namespace
}  // namespace tessera::extender

int main(int argc, char** argv) {
  using tessera::extender::Run;
  const int pods = argc > 1 ? std::atoi(argv[1]) : 800;
  const int runs = argc > 2 ? std::atoi(argv[2]) : 3;
  if (pods <= 0 || pods > 800 || runs <= 0) {
    std::fprintf(stderr, "usage: scheduler_throughput [PODS 1-800] [RUNS]\n");
    return 2;
  }
  std::printf("%-34s %5s %8s %9s %8s\n", "run", "pods", "create_s", "all_bound_s", "pods/s");
  double sum_tessera = 0;
  double sum_baseline = 0;
  for (int run = 0; run < runs; ++run) {
    // Alternate which goes first, so that warm-up effects are shared.
    for (bool with_tessera :
         run % 2 == 0 ? std::vector<bool>{true, false} : std::vector<bool>{false, true}) {
      auto r = Run(with_tessera, pods, run);
      if (!r.ok()) {
        std::fprintf(stderr, "run failed: %s\n", r.status().ToString().c_str());
        return 1;
      }
      const double rate = r->pods / r->seconds;
      (with_tessera ? sum_tessera : sum_baseline) += rate;
      std::printf("%-34s %5d %8.2f %9.2f %8.1f\n",
                  with_tessera ? "tessera fractional (extender)" : "kube-scheduler whole-GPU",
                  r->pods, r->create_seconds, r->seconds, rate);
      std::fflush(stdout);
    }
  }
  std::printf("mean pods/s: tessera %.1f, kube-scheduler alone %.1f, ratio %.2f\n",
              sum_tessera / runs, sum_baseline / runs, sum_tessera / sum_baseline);
  return 0;
}
