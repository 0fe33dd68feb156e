// The extender's HTTP endpoint (plain HTTP on the scheduler's network; kube-scheduler's
// extender config sets enableHTTPS when a TLS proxy fronts it):
//   POST /filter /prioritize /bind /preempt   kube-scheduler's extender verbs (extender.h)
//   GET  /healthz                              the process answers
//   GET  /readyz                               200 once nodes and pods are listed, else 503
//   GET  /ledger                               every GPU's books, JSON (operators, e2e tests)
//   GET  /metrics                              Prometheus text
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "tessera/prometheus.h"
#include "tessera/status.h"

#include "extender/extender.h"
#include "extender/ledger.h"
#include "k8s/listen.h"

namespace tessera::scheduler {

class Server {
 public:
  Server(extender::Extender* extender, extender::Ledger* ledger, int threads);
  ~Server();
  // Binds host:port (port 0: any free port) and returns the port.
  StatusOr<int> Bind(const std::string& host, int port);
  // Serves until Stop(); call after Bind.
  void Run();
  void Stop();
  // More families for GET /metrics (the admission webhooks'); call before Run.
  void AddMetrics(std::function<void(prom::Exposition&)> more);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

using k8s::ParseListenAddress;

}  // namespace tessera::scheduler
