#include "extender/server.h"

#include <httplib.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <map>

#include "tessera/log.h"

namespace tessera::extender {

using nlohmann::json;

namespace {

// Time spent answering each verb (for /metrics: the extender's share of scheduling latency).
struct VerbStats {
  std::atomic<std::uint64_t> count{0};
  std::atomic<std::uint64_t> micros{0};
  std::atomic<std::uint64_t> in_flight{0};
  std::atomic<std::uint64_t> max_in_flight{0};
};

}  // namespace

struct Server::Impl {
  Extender* extender;
  Ledger* ledger;
  httplib::Server http;
  std::map<std::string, VerbStats> verbs;  // filled before serving, then only read
};

namespace {

// A verb: parse the body, answer JSON. A body that is not JSON is a 400 naming the verb.
void Verb(httplib::Server& http, VerbStats* stats, const char* path,
          std::function<bool()> serving, std::function<json(const json&)> verb) {
  http.Post(path, [stats, path, serving = std::move(serving), verb = std::move(verb)](
                      const httplib::Request& req, httplib::Response& res) {
    const auto start = std::chrono::steady_clock::now();
    const std::uint64_t now_in_flight = ++stats->in_flight;
    std::uint64_t seen = stats->max_in_flight.load();
    while (now_in_flight > seen && !stats->max_in_flight.compare_exchange_weak(seen, now_in_flight)) {
    }
    if (!serving()) {
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
    stats->count += 1;
    --stats->in_flight;
    stats->micros += static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                    std::chrono::steady_clock::now() - start)
                                                    .count());
  });
}

}  // namespace

Server::Server(Extender* extender, Ledger* ledger, int threads)
    : impl_(std::make_unique<Impl>()) {
  impl_->extender = extender;
  impl_->ledger = ledger;
  httplib::Server& http = impl_->http;
  const std::size_t n = static_cast<std::size_t>(std::max(threads, 1));
  http.new_task_queue = [n] { return new httplib::ThreadPool(n); };
  http.set_payload_max_length(64ULL << 20);
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
    res.set_content(json{{"gpus", gpus},
                         {"reservations", ledger->reservations()},
                         {"bound", ledger->bound()}}
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
      gpus.push_back({{"node", v.node}, {"uuid", v.uuid}, {"memoryFree", v.memory_free},
                      {"coresFree", v.cores_free}, {"fits", v.fits}, {"why", v.why}});
    }
    res.set_content(json{{"gpus", gpus}}.dump(), "application/json");
  });
  http.Get("/metrics", [extender, ledger, &verbs](const httplib::Request&, httplib::Response& res) {
    const ExtenderCounters& c = extender->counters();
    std::string out;
    auto counter = [&out](const char* name, const char* help, std::uint64_t v) {
      out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" +
             name + " " + std::to_string(v) + "\n";
    };
    auto gauge = [&out](const char* name, const char* help, std::uint64_t v) {
      out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " gauge\n" + name +
             " " + std::to_string(v) + "\n";
    };
    counter("tessera_scheduler_filters_total", "Filter calls.", c.filters);
    counter("tessera_scheduler_filter_errors_total", "Filter calls answered with an error.",
            c.filter_errors);
    counter("tessera_scheduler_unschedulable_total", "Filter calls that found no node.",
            c.unschedulable);
    counter("tessera_scheduler_binds_total", "Bind calls.", c.binds);
    counter("tessera_scheduler_bind_failures_total", "Bind calls that failed.", c.bind_failures);
    counter("tessera_scheduler_preemptions_total", "Preempt calls.", c.preemptions);
    gauge("tessera_scheduler_reservations", "GPU reservations not yet bound.",
          ledger->reservations());
    gauge("tessera_scheduler_bound_pods", "Pods holding GPUs.", ledger->bound());
    gauge("tessera_scheduler_nodes", "Nodes with a usable GPU inventory.", ledger->nodes());
    out += "# HELP tessera_scheduler_request_seconds Time answering kube-scheduler, per verb.\n"
           "# TYPE tessera_scheduler_request_seconds summary\n";
    for (const auto& [verb, stats] : verbs) {
      out += "tessera_scheduler_request_seconds_sum{verb=\"" + verb + "\"} " +
             std::to_string(static_cast<double>(stats.micros.load()) / 1e6) + "\n";
      out += "tessera_scheduler_request_seconds_count{verb=\"" + verb + "\"} " +
             std::to_string(stats.count.load()) + "\n";
      out += "tessera_scheduler_requests_max_in_flight{verb=\"" + verb + "\"} " +
             std::to_string(stats.max_in_flight.load()) + "\n";
    }
    res.set_content(out, "text/plain; version=0.0.4");
  });
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

StatusOr<std::pair<std::string, int>> ParseListenAddress(const std::string& text) {
  const std::size_t colon = text.rfind(':');
  const auto bad = [&text] {
    return InvalidArgumentError("--listen " + text + ": expected HOST:PORT, e.g. 0.0.0.0:8888");
  };
  if (colon == std::string::npos || colon + 1 == text.size()) return bad();
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data() + colon + 1, end, port);
  if (ec != std::errc() || ptr != end || port < 0 || port > 65535 || host.empty()) return bad();
  return std::make_pair(host, port);
}

}  // namespace tessera::extender
