// tessera-scheduler: kube-scheduler extender (docs/design/0012-scheduler-extender.md).
#include <cstdio>

#include <CLI/CLI.hpp>

#include "tessera/build_info.h"
#include "tessera/log.h"

#include "scheduler/daemon.h"

int main(int argc, char** argv) {
  tessera::scheduler::SchedulerOptions o;
  CLI::App app{"tessera-scheduler: places fractional GPU pods for kube-scheduler (extender)",
               "tessera-scheduler"};
  app.add_option("--kubeconfig", o.kubeconfig, "kubeconfig (default: $KUBECONFIG, in-cluster)");
  app.add_option("--listen", o.listen,
                 "HOST:PORT of the extender verbs (unauthenticated: keep it on loopback, beside "
                 "kube-scheduler)")
      ->capture_default_str();
  app.add_option("--placement", o.placement, "placement policy")->capture_default_str();
  app.add_option("--policy", o.policy_file, "the administrator's tessera policy file (YAML)");
  app.add_option("--signing-key", o.signing_key_file, "Ed25519 private key (PEM) for decisions")
      ->required();
  app.add_option("--key-id", o.key_id, "key id written into each decision")->capture_default_str();
  std::int64_t ttl_ms = o.reservation_ttl.count();
  app.add_option("--reservation-ttl-ms", ttl_ms, "release reservations not bound within this")
      ->check(CLI::Range(std::int64_t{100}, std::int64_t{600'000}))
      ->capture_default_str();
  app.add_option("--qps", o.qps, "API client rate limit, requests per second (1-100000)")
      ->check(CLI::Range(1.0, 100'000.0, "1-100000"))
      ->capture_default_str();
  app.add_option("--burst", o.burst, "API client burst, requests (1-100000)")
      ->check(CLI::Range(1, 100'000, "1-100000"))
      ->capture_default_str();
  app.add_option("--threads", o.threads, "HTTP worker threads")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--ready-file", o.ready_file, "write the port here once serving and synced");
  app.add_option("--webhook-listen", o.webhook_listen,
                 "HOST:PORT of the admission webhooks (HTTPS)")
      ->capture_default_str();
  app.add_option("--tls-cert-file", o.tls_cert_file,
                 "webhook serving certificate (PEM, re-read when it changes)");
  app.add_option("--tls-key-file", o.tls_key_file, "webhook serving key (PEM)");
  app.add_option("--scheduler-user", o.scheduler_users,
                 "user allowed to write decisions (repeatable; the scheduler's own identity)")
      ->capture_default_str();
  app.add_option(
         "--scheduler-name", o.scheduler_name,
         "kube-scheduler profile that calls this extender (pods of kai-scheduler move to it)")
      ->capture_default_str();
  app.add_flag("--count-claims", o.count_claims,
               "watch ResourceClaims: namespace quotas count claims of tessera's DeviceClasses "
               "(the DRA path; needs list and watch on resourceclaims)");
  app.add_flag("--leader-elect", o.leader_elect,
               "elect one leader among replicas on a Lease; the others answer 503");
  app.add_option("--lease-namespace", o.lease_namespace, "namespace of the Lease")
      ->capture_default_str();
  app.add_option("--lease-name", o.lease_name, "name of the Lease")->capture_default_str();
  app.add_option("--identity", o.identity, "this replica's identity (default: hostname + random)");
  std::int64_t lease_s = o.lease_duration.count();
  std::int64_t renew_ms = o.renew_deadline.count();
  std::int64_t retry_ms = o.retry_period.count();
  app.add_option("--lease-duration-s", lease_s, "Lease duration")
      ->check(CLI::Range(1, 600))
      ->capture_default_str();
  app.add_option("--renew-deadline-ms", renew_ms,
                 "leader gives up after failing to renew this long")
      ->check(CLI::Range(100, 600'000))
      ->capture_default_str();
  app.add_option("--retry-period-ms", retry_ms, "between Lease attempts")
      ->check(CLI::Range(50, 600'000))
      ->capture_default_str();
  std::string level = "info";
  app.add_option("--log-level", level, "error, warn, info, debug")->capture_default_str();
  app.set_version_flag("--version", tessera::VersionLine("tessera-scheduler"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {  // a usage error exits 2, as every tessera binary's
    std::fprintf(stderr, "tessera-scheduler: %s\n", e.what());
    return 2;
  }
  auto parsed = tessera::log::ParseLevel(level);
  if (!parsed.ok()) {
    std::fprintf(stderr, "tessera-scheduler: --log-level: %s\n", parsed.status().message().c_str());
    return 2;
  }
  tessera::log::SetLevel(*parsed);
  o.reservation_ttl = std::chrono::milliseconds(ttl_ms);
  o.lease_duration = std::chrono::seconds(lease_s);
  o.renew_deadline = std::chrono::milliseconds(renew_ms);
  o.retry_period = std::chrono::milliseconds(retry_ms);
  return tessera::scheduler::RunScheduler(o);
}
