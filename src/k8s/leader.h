// Leader election on a coordination.k8s.io/v1 Lease (ADR 0011, "Leader election"): of several
// replicas, one leads (e.g. answers kube-scheduler's extender calls), the others wait.
//
//   candidate ── Lease absent (create), holder "" or us, or unchanged for leaseDuration ──► leader
//       ▲               (PUT with the resourceVersion read: a compare-and-swap)              │
//       └── no successful renew for renew_deadline, another holder seen, or a 409 ───────────┘
//   A leader renews every retry_period. On stop it stops leading first, then (release_on_cancel)
//   empties holderIdentity so that another candidate takes over at once.
//
// Expiry is judged by the local monotonic clock only: a candidate notes when it last saw the
// Lease change (resourceVersion, holder or renewTime) and takes it over once leaseDurationSeconds
// have passed since then without a change. renewTime/acquireTime are written (wall clock, RFC 3339
// with microseconds) for people, never trusted: clocks of replicas differ.
//
// A leader counts itself leader until (start of its last successful renew) + renew_deadline, which
// is before any candidate can see the Lease expire (renew_deadline < lease_duration). IsLeader()
// compares that instant with the clock on every call, so it turns false in time even while a
// renew request hangs; on_stopped_leading follows when the Run() thread notices.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>

#include "tessera/clock.h"
#include "tessera/status.h"

#include "k8s/client.h"
#include "k8s/config.h"

namespace tessera::k8s {

struct LeaderElectorOptions {
  std::string ns;          // the Lease's namespace
  std::string lease_name;  // e.g. "tessera-scheduler"
  // Must be unique among the candidates. Empty: DefaultLeaderIdentity().
  std::string identity;
  // Written as spec.leaseDurationSeconds: how long candidates wait without seeing a renew.
  std::chrono::seconds lease_duration{15};
  // A leader that has not renewed successfully for this long stops leading (< lease_duration).
  std::chrono::milliseconds renew_deadline{10000};
  // Between attempts, for leaders and candidates (< renew_deadline); candidates add 0-20 %.
  std::chrono::milliseconds retry_period{2000};
  // On stop, a leader empties holderIdentity so that another can take over at once. false:
  // the Lease is left to expire (as if the process had died).
  bool release_on_cancel = true;
  // Time as the elector sees it: Now() for every expiry and deadline (called from IsLeader()
  // too), WallNow() for the timestamps written into the Lease (informational), SleepUntil()
  // between rounds. nullptr: Clock::Real(); tests inject a fake one. Must outlive the elector.
  Clock* clock = nullptr;

  // Called on the Run() thread, in order; keep them short.
  std::function<void()> on_started_leading;
  std::function<void()> on_stopped_leading;  // IsLeader() is already false
  // The holder seen in the Lease changed (our own identity included; "" after a release).
  std::function<void(const std::string& identity)> on_new_leader;
};

// hostname + "_" + 16 random hex digits.
std::string DefaultLeaderIdentity();

// "2006-01-02T15:04:05.000000Z" (metav1.MicroTime), UTC.
std::string FormatMicroTime(std::chrono::system_clock::time_point time);

class LeaderElector {
 public:
  // Checks the options (names set, 0 < retry_period < renew_deadline < lease_duration) and makes
  // a Client of its own from `config`: its own rate limit, and a per-call timeout of at most
  // renew_deadline / 2, so that one renew (GET + PUT) cannot outlast the deadline.
  static StatusOr<std::unique_ptr<LeaderElector>> New(const Config& config,
                                                      LeaderElectorOptions options);
  ~LeaderElector();
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  // Campaigns, leads, and campaigns again after losing the lead, until `stop` is requested;
  // then a leader stops leading (and releases the Lease when release_on_cancel). One Run() at a
  // time. A request in flight when `stop` comes is finished first (bounded by its timeout).
  void Run(std::stop_token stop);

  // Whether this replica may act as the leader now: one atomic load and a clock read, for any
  // thread.
  bool IsLeader() const;
  // The holder last seen in the Lease ("" if none or not read yet).
  std::string LeaderIdentity() const;
  const std::string& identity() const { return options_.identity; }
  const LeaderElectorOptions& options() const { return options_; }

 private:
  enum class Attempt : std::uint8_t { kHeld, kNotHeld, kFailed };

  LeaderElector(std::unique_ptr<Client> client, LeaderElectorOptions options);
  // One round: read the Lease, and create, take over or renew it if the rules allow.
  Attempt TryAcquireOrRenew();
  // Notes a Lease read or written at `now`: restarts the expiry timer if it changed.
  void Observe(const Json& lease, Clock::TimePoint now);
  void StartLeading(Clock::TimePoint until);
  void StopLeading(const char* why);  // on stop: after the release, if any
  void Release();
  void SetLeaderUntil(Clock::TimePoint until);

  std::unique_ptr<Client> client_;
  const LeaderElectorOptions options_;
  Clock& clock_;
  const std::string path_;

  // The instant (steady clock, ns since its epoch) until which we lead; kNotLeading when not.
  static constexpr std::int64_t kNotLeading = std::numeric_limits<std::int64_t>::min();
  std::atomic<std::int64_t> leader_until_ns_{kNotLeading};

  // The Run() thread's own state.
  bool leading_ = false;
  std::string observed_version_;      // resourceVersion, holder and renewTime last seen
  Clock::TimePoint observed_time_{};  // when they last changed
  std::chrono::seconds observed_duration_{0};
  std::string reported_leader_;

  mutable std::mutex mu_;
  std::string leader_identity_;  // guarded by mu_
};

}  // namespace tessera::k8s
