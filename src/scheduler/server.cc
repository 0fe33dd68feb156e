#include "scheduler/server.h"

#include <atomic>
#include <charconv>
#include <chrono>
#include <map>

#include <httplib.h>

#include "tessera/log.h"
#include "tessera/names.h"
#include "tessera/prometheus.h"

namespace tessera::scheduler {

using extender::Extender;
using extender::ExtenderCounters;
using extender::GpuBooks;
using extender::GpuVerdict;
using extender::Ledger;

using nlohmann::json;

namespace {

// Time spent answering each verb (for /metrics: the extender's share of scheduling latency).
struct VerbStats {
  prom::Histogram seconds;
  std::atomic<std::uint64_t> in_flight{0};
  std::atomic<std::uint64_t> max_in_flight{0};
};

}  // namespace

struct Server::Impl {
  Extender* extender;
  Ledger* ledger;
  httplib::Server http;
  std::map<std::string, VerbStats> verbs;  // filled before serving, then only read
  std::vector<std::function<void(prom::Exposition&)>> more_metrics;  // AddMetrics, before serving
};

namespace {

constexpr std::size_t kMaxRequestBytes = std::size_t{4} << 20;

// A verb: parse the body, answer JSON. A body that is not JSON is a 400 naming the verb.
void Verb(httplib::Server& http, VerbStats* stats, const char* path, std::function<bool()> serving,
          std::function<json(const json&)> verb) {
  http.Post(path, [stats, path, serving = std::move(serving), verb = std::move(verb)](
                      const httplib::Request& req, httplib::Response& res) {
    const auto start = std::chrono::steady_clock::now();
    const std::uint64_t now_in_flight = ++stats->in_flight;
    std::uint64_t seen = stats->max_in_flight.load();
    while (now_in_flight > seen &&
           !stats->max_in_flight.compare_exchange_weak(seen, now_in_flight)) {
    }
    if (!serving()) {
      --stats->in_flight;
      res.status = 503;
      res.set_content(json{{"Error", "tessera-scheduler: not the leader (or not synced)"}}.dump(),
                      "application/json");
      return;
    }
    const json args = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (args.is_discarded()) {
      --stats->in_flight;
      res.status = 400;
      res.set_content(json{{"Error", std::string(path) + ": request body is not JSON"}}.dump(),
                      "application/json");
      return;
    }
    res.set_content(verb(args).dump(-1, ' ', false, json::error_handler_t::replace),
                    "application/json");
    --stats->in_flight;
    stats->seconds.Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  });
}

}  // namespace

Server::Server(Extender* extender, Ledger* ledger, int threads) : impl_(std::make_unique<Impl>()) {
  impl_->extender = extender;
  impl_->ledger = ledger;
  httplib::Server& http = impl_->http;
  const std::size_t n = static_cast<std::size_t>(std::max(threads, 1));
  http.new_task_queue = [n] { return new httplib::ThreadPool(n); };
  // The largest real ExtenderArgs: a pod (etcd keeps objects under 1.5 MiB) and, with
  // nodeCacheCapable, the node names of a 5,000-node cluster (each at most 253 bytes): under
  // 3 MiB. A larger body is refused with 413 naming the limit.
  http.set_payload_max_length(kMaxRequestBytes);
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status != 413) return;
    res.set_content(
        json{{"Error", "tessera-scheduler: " + req.path + ": request body over the limit of " +
                           std::to_string(kMaxRequestBytes >> 20) + " MiB"}}
            .dump(),
        "application/json");
  });
  // httplib gives a keep-alive connection its worker thread until the connection goes idle
  // past this; kube-scheduler binds from many goroutines at once and keeps their connections
  // open, so keep idle ones short or they starve the pool.
  http.set_keep_alive_timeout(1);
  // Headers and body go out in separate writes: without this, Nagle's algorithm and the
  // client's delayed ACK add tens of milliseconds to every answer (measured: 40 pods/s).
  http.set_tcp_nodelay(true);
  http.set_keep_alive_max_count(1000);
  auto& verbs = impl_->verbs;
  auto serving = [extender] { return extender->serving(); };
  Verb(http, &verbs["filter"], "/filter", serving,
       [extender](const json& a) { return extender->Filter(a); });
  Verb(http, &verbs["prioritize"], "/prioritize", serving,
       [extender](const json& a) { return extender->Prioritize(a); });
  Verb(http, &verbs["bind"], "/bind", serving,
       [extender](const json& a) { return extender->Bind(a); });
  Verb(http, &verbs["preempt"], "/preempt", serving,
       [extender](const json& a) { return extender->Preempt(a); });
  http.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok", "text/plain");
  });
  // The leader that has synced: what a Service for the extender selects (see ADR 0012).
  http.Get("/leaderz", [extender](const httplib::Request&, httplib::Response& res) {
    res.status = extender->serving() ? 200 : 503;
    res.set_content(extender->serving() ? "leader" : "not leader", "text/plain");
  });
  http.Get("/readyz", [extender](const httplib::Request&, httplib::Response& res) {
    res.status = extender->synced() ? 200 : 503;
    res.set_content(extender->synced() ? "ok" : "not synced", "text/plain");
  });
  http.Get("/ledger", [ledger](const httplib::Request&, httplib::Response& res) {
    json gpus = json::array();
    for (const GpuBooks& b : ledger->Books()) {
      gpus.push_back({{"node", b.node},
                      {"uuid", b.uuid},
                      {"memoryBytes", b.memory_bytes},
                      {"memoryUsed", b.memory_used},
                      {"coresUsed", b.milli_used / 10},
                      {"pods", b.pods}});
    }
    res.set_content(
        json{{"gpus", gpus}, {"reservations", ledger->reservations()}, {"bound", ledger->bound()}}
            .dump(),
        "application/json");
  });
  // A dry run of filter for a pod (`tessera explain`): every GPU and why it would or would not
  // take the pod. Answers on every replica; reserves nothing.
  http.Post("/explain", [ledger](const httplib::Request& req, httplib::Response& res) {
    const json pod = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    auto verdicts = ledger->Explain(pod.is_discarded() ? json() : pod);
    if (!verdicts.ok()) {
      res.status = 400;
      res.set_content(json{{"error", verdicts.status().message()}}.dump(), "application/json");
      return;
    }
    json gpus = json::array();
    for (const GpuVerdict& v : *verdicts) {
      gpus.push_back({{"node", v.node},
                      {"uuid", v.uuid},
                      {"memoryFree", v.memory_free},
                      {"coresFree", v.cores_free},
                      {"fits", v.fits},
                      {"why", v.why}});
    }
    res.set_content(json{{"gpus", gpus}}.dump(), "application/json");
  });
  http.Get("/metrics", [extender, ledger, impl = impl_.get()](const httplib::Request&,
                                                              httplib::Response& res) {
    namespace n = names;
    const ExtenderCounters& c = extender->counters();
    prom::Exposition out;
    const auto count = [](std::uint64_t v) { return static_cast<double>(v); };
    c.ForEach([&](std::string_view metric, std::uint64_t v) { out.Add(metric, {}, count(v)); });
    out.Add(n::kMetricSchedulerReservations, {}, count(ledger->reservations()));
    out.Add(n::kMetricSchedulerBoundPods, {}, count(ledger->bound()));
    out.Add(n::kMetricSchedulerNodes, {}, count(ledger->nodes()));
    for (const auto& [verb, stats] : impl->verbs) {
      out.Add(n::kMetricSchedulerRequestSeconds, {{"verb", verb}}, stats.seconds);
      out.Add(n::kMetricSchedulerInFlightMax, {{"verb", verb}}, count(stats.max_in_flight.load()));
    }
    for (const auto& more : impl->more_metrics) more(out);
    res.set_content(out.Text(), "text/plain; version=0.0.4");
  });
}

void Server::AddMetrics(std::function<void(prom::Exposition&)> more) {
  impl_->more_metrics.push_back(std::move(more));
}

Server::~Server() { Stop(); }

StatusOr<int> Server::Bind(const std::string& host, int port) {
  const int bound = port == 0 ? impl_->http.bind_to_any_port(host)
                              : (impl_->http.bind_to_port(host, port) ? port : -1);
  if (bound < 0) {
    return UnavailableError("listen " + host + ":" + std::to_string(port) + ": cannot bind");
  }
  return bound;
}

void Server::Run() { impl_->http.listen_after_bind(); }

void Server::Stop() { impl_->http.stop(); }

}  // namespace tessera::scheduler
