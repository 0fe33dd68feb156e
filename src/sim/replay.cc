#include "sim/replay.h"

#include <chrono>

#include "placement/scheduler.h"

namespace tessera::sim {

StatusOr<SimInput> MakeSimInput(std::vector<placement::Node> nodes, std::vector<TracePod> pods,
                                std::string workload) {
  if (nodes.empty()) return InvalidArgumentError("empty cluster: the node list has no nodes");
  if (pods.empty()) return InvalidArgumentError("empty workload: the pod list has no pods");
  TESSERA_ASSIGN_OR_RETURN(placement::Cluster cluster,
                           placement::Cluster::Create(std::move(nodes)));
  if (cluster.total_gpus() == 0) {
    return InvalidArgumentError("the node list has no GPUs: allocation is undefined");
  }
  placement::WorkloadProfile typical = TypicalPods(pods);
  return SimInput{std::move(workload), std::move(cluster), std::move(pods), std::move(typical)};
}

StatusOr<RunResult> RunExperiment(const SimInput& input, placement::PolicyKind kind,
                                  std::int64_t seed, const RunOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<placement::Rand> rand, MakeRand(options.rng, seed));
  placement::Cluster cluster = input.cluster;
  const Workload w = GenerateWorkload(input.pods, cluster.size(), cluster.total_gpu_milli(), *rand,
                                      options.workload);
  std::vector<placement::Request> requests;
  requests.reserve(w.pods.size());
  for (const TracePod& p : w.pods) requests.push_back(ToRequest(p));

  std::unique_ptr<placement::PlacementPolicy> policy =
      placement::MakePolicy(kind, cluster, input.typical, rand.get());
  placement::Scheduler scheduler(&cluster, policy.get(), w.ranks);
  const placement::Fragmentation frag(cluster, input.typical);
  std::vector<double> node_frag(cluster.size());
  for (std::size_t i = 0; i < cluster.size(); ++i) node_frag[i] = frag.Of(i);

  RunResult result;
  result.policy = kind;
  result.seed = seed;
  result.pods = w.arrival.size();
  result.capacity_milli = cluster.total_gpu_milli();
  std::vector<EventRecord> events;
  events.reserve(w.arrival.size());
  EventRecord rec;
  for (std::size_t i = 0; i < cluster.size(); ++i)
    rec.idle_milli += cluster.state(i).gpu_milli_free;
  for (const std::uint32_t idx : w.arrival) {
    const placement::Request& req = requests[idx];
    const std::int64_t milli = w.pods[idx].total_milli();
    rec.arrived_milli += milli;
    StatusOr<placement::Allocation> placed = scheduler.Place(req);
    if (placed.ok()) {
      const std::size_t node = placed->node;
      node_frag[node] = frag.Of(node);
      rec.used_milli += static_cast<std::int64_t>(req.gpu_count) * req.gpu_milli;
      rec.idle_milli -= static_cast<std::int64_t>(req.gpu_count) * req.gpu_milli;
    } else if (placed.status().code() == StatusCode::kResourceExhausted) {
      ++result.failed_pods;
    } else {
      return placed.status();
    }
    double sum = 0;
    for (const double f : node_frag) sum += f;
    rec.frag_milli = sum;
    events.push_back(rec);
  }
  result.arrived_milli = rec.arrived_milli;
  result.used_milli = rec.used_milli;
  result.unallocated_gpus =
      static_cast<double>(result.capacity_milli - result.used_milli) / placement::kMilliPerGpu;
  result.curve = Discretise(events, static_cast<std::int64_t>(cluster.total_gpus()));
  if (options.keep_events) result.events = std::move(events);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace tessera::sim
