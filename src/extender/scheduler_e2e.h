// Shared by the scheduler's end-to-end test and throughput benchmark: the kube-scheduler
// configuration that calls tessera-scheduler, and starting tessera-scheduler as a child.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>

#include "e2e/testcluster.h"

namespace tessera::extender::e2etest {

// A loopback port free right now (tessera-scheduler must be named in kube-scheduler's
// configuration before either starts).
inline int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  return ok ? ntohs(addr.sin_port) : -1;
}

// KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1) with tessera-scheduler as the
// extender, as docs/design/0012 describes.
inline std::string SchedulerConfig(int port) {
  std::string managed;
  for (const char* name : {"tessera.dev/gpu", "tessera.dev/gpu-memory", "tessera.dev/gpu-cores"}) {
    managed += std::string("  - name: ") + name + "\n    ignoredByScheduler: false\n";
  }
  return "apiVersion: kubescheduler.config.k8s.io/v1\n"
         "kind: KubeSchedulerConfiguration\n"
         "extenders:\n"
         "- urlPrefix: http://127.0.0.1:" + std::to_string(port) + "\n"
         "  filterVerb: filter\n"
         "  prioritizeVerb: prioritize\n"
         "  bindVerb: bind\n"
         "  preemptVerb: preempt\n"
         "  weight: 1\n"
         "  nodeCacheCapable: true\n"
         "  enableHTTPS: false\n"
         "  httpTimeout: 30s\n"
         "  managedResources:\n" + managed;
}

// Starts tessera-scheduler and waits until it has listed nodes and pods.
inline StatusOr<std::unique_ptr<e2e::ChildProcess>> StartTesseraScheduler(
    const std::string& binary, const std::string& kubeconfig, int port,
    const std::string& signing_key, const std::string& dir, const std::string& tag) {
  const std::string ready = dir + "/scheduler.ready." + tag;
  e2e::ChildOptions o;
  o.argv = {binary, "--kubeconfig", kubeconfig, "--listen", "127.0.0.1:" + std::to_string(port),
            "--signing-key", signing_key, "--key-id", "e2e", "--reservation-ttl-ms", "20000",
            "--ready-file", ready, "--log-level", "info"};
  o.log_path = dir + "/tessera-scheduler.log";
  return e2e::SpawnAndWaitForFile(std::move(o), ready, std::chrono::seconds(60));
}

}  // namespace tessera::extender::e2etest
