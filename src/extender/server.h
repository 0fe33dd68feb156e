// The extender's HTTP endpoint (plain HTTP on the scheduler's network; kube-scheduler's
// extender config sets enableHTTPS when a TLS proxy fronts it):
//   POST /filter /prioritize /bind /preempt   kube-scheduler's extender verbs (extender.h)
//   GET  /healthz                              the process answers
//   GET  /readyz                               200 once nodes and pods are listed, else 503
//   GET  /ledger                               every GPU's books, JSON (operators, e2e tests)
//   GET  /metrics                              Prometheus text
#pragma once

#include <memory>
#include <string>

#include "extender/extender.h"
#include "extender/ledger.h"
#include "tessera/status.h"

namespace tessera::extender {

class Server {
 public:
  Server(Extender* extender, Ledger* ledger, int threads);
  ~Server();
  // Binds host:port (port 0: any free port) and returns the port.
  StatusOr<int> Bind(const std::string& host, int port);
  // Serves until Stop(); call after Bind.
  void Run();
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "host:port" -> (host, port). Port 0-65535.
StatusOr<std::pair<std::string, int>> ParseListenAddress(const std::string& text);

}  // namespace tessera::extender
