// tessera-scheduler: the extender process. Watches Nodes and Pods through the Kubernetes
// client, keeps the Ledger, serves the verbs (server.h), writes decisions and Bindings.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tessera/status.h"

#include "placement/policies.h"

namespace tessera::scheduler {

struct SchedulerOptions {
  std::string kubeconfig;  // empty: $KUBECONFIG, in-cluster, ~/.kube/config
  // Loopback by default: tessera-scheduler runs beside kube-scheduler in its pod, so no other
  // pod can reach the verbs (they are unauthenticated, as kube-scheduler's HTTP extenders are).
  std::string listen = "127.0.0.1:8888";
  std::string placement = "tessera";  // a placement policy name (tessera sim --policy)
  std::string policy_file;            // the administrator's policy; empty: built-in defaults
  std::string signing_key_file;       // Ed25519 private key, PEM (required)
  std::string key_id = "default";     // names the key in each decision
  std::chrono::milliseconds reservation_ttl{30'000};
  double qps = 1000;  // a bind is two writes; kube-scheduler binds hundreds of pods/s
  int burst = 2000;
  int threads = 64;        // HTTP worker threads (one per open connection)
  std::string ready_file;  // written with the port once serving and synced (tests)

  // Admission webhooks (HTTPS), served when a certificate is given (docs/design/0013).
  std::string webhook_listen = "0.0.0.0:8443";
  std::string tls_cert_file;
  std::string tls_key_file;
  // Users whose requests may carry decisions: the scheduler's own identity.
  std::vector<std::string> scheduler_users = {
      "system:serviceaccount:tessera-system:tessera-scheduler"};
  std::string scheduler_name = "default-scheduler";  // the kube-scheduler profile calling us
  // Watch ResourceClaims so that namespace quotas count what claims of tessera's DeviceClasses
  // take (the DRA path; the chart sets it with node.allocationPath dra).
  bool count_claims = false;

  // High availability: replicas elect a leader on a coordination.k8s.io Lease; only the leader
  // answers the extender verbs (others: 503), every replica serves the webhooks.
  bool leader_elect = false;
  std::string lease_namespace = "tessera-system";
  std::string lease_name = "tessera-scheduler";
  std::string identity;  // empty: hostname + random suffix
  std::chrono::seconds lease_duration{15};
  std::chrono::milliseconds renew_deadline{10'000};
  std::chrono::milliseconds retry_period{2'000};
};

// Runs until SIGINT or SIGTERM. Returns the process exit code; configuration errors are
// printed naming the flag (exit 2).
// The process as ordered steps (Falco's startup actions; demo::Demo::Run). RunScheduler calls
// them in this order and stops at the first error; tests may run them one by one.
//   ValidateConfiguration   flags, the policy file, the signing key: nothing is started
//   ConnectApi              the Kubernetes client (no request yet)
//   LoadWebhookCertificates the webhooks' certificate and listen address, when TLS is given
//   BlockSignals            SIGINT/SIGTERM left to WaitForSignalAndStop
//   BuildExtender           ledger, extender, the verbs' HTTP listener (bound)
//   BuildAdmission          quotas, webhooks, their HTTPS listener (bound), admission metrics
//   StartWatches            node and pod reflectors, the reservation sweeper, the ready file
//   StartElection           the Lease (when --leader-elect) and the leader's resync
//   Serve                   the listeners' threads
//   WaitForSignalAndStop    the shutdown order: verbs, webhooks, Lease, watches
class SchedulerProcess {
 public:
  explicit SchedulerProcess(SchedulerOptions options);
  ~SchedulerProcess();
  SchedulerProcess(const SchedulerProcess&) = delete;
  SchedulerProcess& operator=(const SchedulerProcess&) = delete;

  Status ValidateConfiguration();
  Status ConnectApi();
  Status LoadWebhookCertificates();
  void BlockSignals();
  Status BuildExtender();
  Status BuildAdmission();
  void StartWatches();
  Status StartElection();
  void Serve();
  void WaitForSignalAndStop();

 private:
  struct State;
  SchedulerOptions options_;
  std::unique_ptr<State> s_;
};

// Runs the steps in order: 0 after a signal, 2 for bad configuration, 1 otherwise.
int RunScheduler(const SchedulerOptions& options);

}  // namespace tessera::scheduler
