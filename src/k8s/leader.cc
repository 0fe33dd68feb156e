#include "k8s/leader.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <random>
#include <unistd.h>
#include <utility>

#include "tessera/log.h"

#include "k8s/errors.h"
#include "k8s/object.h"
#include "k8s/paths.h"

namespace tessera::k8s {
namespace {

using k8s::IntAt;
using k8s::StringAt;
using std::chrono::duration_cast;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;

const Json& Spec(const Json& lease) {
  static const Json kEmpty = Json::object();
  const auto it = lease.is_object() ? lease.find("spec") : lease.end();
  return lease.is_object() && it != lease.end() ? *it : kEmpty;
}

}  // namespace

std::string DefaultLeaderIdentity() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
    std::snprintf(host, sizeof(host), "unknown");
  }
  std::random_device random;
  const std::uint64_t suffix = (static_cast<std::uint64_t>(random()) << 32) ^ random();
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(suffix));
  return std::string(host) + "_" + hex;
}

std::string FormatMicroTime(std::chrono::system_clock::time_point time) {
  const std::int64_t micros =
      duration_cast<std::chrono::microseconds>(time.time_since_epoch()).count();
  std::int64_t seconds = micros / 1000000;
  std::int64_t fraction = micros % 1000000;
  if (fraction < 0) {  // before 1970: floor
    fraction += 1000000;
    --seconds;
  }
  const std::time_t t = static_cast<std::time_t>(seconds);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char out[64];
  std::snprintf(out, sizeof(out), "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<long long>(fraction));
  return out;
}

StatusOr<std::unique_ptr<LeaderElector>> LeaderElector::New(const Config& config,
                                                            LeaderElectorOptions options) {
  if (options.ns.empty() || options.lease_name.empty()) {
    return InvalidArgumentError("leader election: the Lease's namespace and name must be set");
  }
  if (options.identity.empty()) options.identity = DefaultLeaderIdentity();
  if (options.retry_period <= milliseconds(0) || options.renew_deadline <= options.retry_period ||
      options.lease_duration <= options.renew_deadline) {
    return InvalidArgumentError(
        "leader election: need 0 < retry_period < renew_deadline < lease_duration (got " +
        std::to_string(options.retry_period.count()) + " ms, " +
        std::to_string(options.renew_deadline.count()) + " ms, " +
        std::to_string(options.lease_duration.count()) + " s)");
  }
  Config own = config;
  own.timeout = std::min(own.timeout, options.renew_deadline / 2);
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::New(std::move(own)));
  return std::unique_ptr<LeaderElector>(new LeaderElector(std::move(client), std::move(options)));
}

LeaderElector::LeaderElector(std::unique_ptr<Client> client, LeaderElectorOptions options)
    : client_(std::move(client)),
      options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : Clock::Real()),
      path_(LeasePath(options_.ns, options_.lease_name)) {}

LeaderElector::~LeaderElector() = default;

bool LeaderElector::IsLeader() const {
  const std::int64_t until = leader_until_ns_.load(std::memory_order_acquire);
  if (until == kNotLeading) return false;
  return duration_cast<nanoseconds>(clock_.Now().time_since_epoch()).count() < until;
}

std::string LeaderElector::LeaderIdentity() const {
  std::lock_guard<std::mutex> lock(mu_);
  return leader_identity_;
}

void LeaderElector::SetLeaderUntil(Clock::TimePoint until) {
  leader_until_ns_.store(duration_cast<nanoseconds>(until.time_since_epoch()).count(),
                         std::memory_order_release);
}

void LeaderElector::Observe(const Json& lease, Clock::TimePoint now) {
  const Json& spec = Spec(lease);
  const std::string holder = StringAt(spec, "holderIdentity");
  // Any write makes a new resourceVersion; holder and renewTime are compared as well in case a
  // server (or a fake) does not.
  std::string version = lease.is_object() ? ResourceVersionOf(lease) : std::string();
  version += '\n' + holder + '\n' + StringAt(spec, "renewTime");
  if (version != observed_version_) {
    observed_version_ = std::move(version);
    observed_time_ = now;
  }
  const std::int64_t seconds = IntAt(spec, "leaseDurationSeconds");
  observed_duration_ = seconds > 0 ? std::chrono::seconds(seconds) : options_.lease_duration;
  {
    std::lock_guard<std::mutex> lock(mu_);
    leader_identity_ = holder;
  }
  if (holder != reported_leader_) {
    reported_leader_ = holder;
    TESSERA_LOG(kInfo, kK8s, "lease %s: the holder is now \"%s\"", path_.c_str(), holder.c_str());
    if (options_.on_new_leader) options_.on_new_leader(holder);
  }
}

LeaderElector::Attempt LeaderElector::TryAcquireOrRenew() {
  const std::string wall = FormatMicroTime(clock_.WallNow());
  StatusOr<Json> got = client_->Get(path_);
  if (!got.ok() && !IsNotFound(got.status())) {
    TESSERA_LOG(kWarn, kK8s, "lease %s: %s", path_.c_str(), got.status().ToString().c_str());
    return Attempt::kFailed;
  }
  if (!got.ok()) {  // no Lease yet: create it, holding it
    const Json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                        {"kind", "Lease"},
                        {"metadata", {{"name", options_.lease_name}, {"namespace", options_.ns}}},
                        {"spec",
                         {{"holderIdentity", options_.identity},
                          {"leaseDurationSeconds", options_.lease_duration.count()},
                          {"acquireTime", wall},
                          {"renewTime", wall},
                          {"leaseTransitions", 0}}}};
    StatusOr<Json> created = client_->Create(LeasesPath(options_.ns), lease);
    if (!created.ok()) {
      if (IsAlreadyExists(created.status())) return Attempt::kNotHeld;  // another was faster
      TESSERA_LOG(kWarn, kK8s, "lease %s: %s", path_.c_str(), created.status().ToString().c_str());
      return Attempt::kFailed;
    }
    Observe(*created, clock_.Now());
    return Attempt::kHeld;
  }

  Observe(*got, clock_.Now());
  const Json& spec = Spec(*got);
  const std::string holder = StringAt(spec, "holderIdentity");
  if (!holder.empty() && holder != options_.identity &&
      clock_.Now() < observed_time_ + observed_duration_) {
    return Attempt::kNotHeld;  // held by another, renewed within its duration as we saw it
  }
  Json lease = *got;
  Json& out = lease["spec"];
  if (!out.is_object()) out = Json::object();
  if (holder != options_.identity) {
    out["acquireTime"] = wall;
    out["leaseTransitions"] = IntAt(spec, "leaseTransitions") + 1;
  }
  out["holderIdentity"] = options_.identity;
  out["leaseDurationSeconds"] = options_.lease_duration.count();
  out["renewTime"] = wall;
  // metadata.resourceVersion stays: the PUT is a compare-and-swap.
  StatusOr<Json> updated = client_->Update(path_, lease);
  if (!updated.ok()) {
    if (IsConflict(updated.status())) {
      TESSERA_LOG(kInfo, kK8s, "lease %s: changed by another writer meanwhile (409)",
                  path_.c_str());
      return Attempt::kNotHeld;
    }
    TESSERA_LOG(kWarn, kK8s, "lease %s: %s", path_.c_str(), updated.status().ToString().c_str());
    return Attempt::kFailed;
  }
  Observe(*updated, clock_.Now());
  return Attempt::kHeld;
}

void LeaderElector::StartLeading(Clock::TimePoint until) {
  SetLeaderUntil(until);
  leading_ = true;
  TESSERA_LOG(kInfo, kK8s, "lease %s: %s started leading", path_.c_str(),
              options_.identity.c_str());
  if (options_.on_started_leading) options_.on_started_leading();
}

void LeaderElector::StopLeading(const char* why) {
  leader_until_ns_.store(kNotLeading, std::memory_order_release);
  leading_ = false;
  TESSERA_LOG(kInfo, kK8s, "lease %s: %s stopped leading: %s", path_.c_str(),
              options_.identity.c_str(), why);
  if (options_.on_stopped_leading) options_.on_stopped_leading();
}

void LeaderElector::Release() {
  StatusOr<Json> got = client_->Get(path_);
  if (!got.ok()) {
    TESSERA_LOG(kWarn, kK8s, "lease %s: not released: %s", path_.c_str(),
                got.status().ToString().c_str());
    return;
  }
  if (StringAt(Spec(*got), "holderIdentity") != options_.identity) return;  // not ours now
  const std::string wall = FormatMicroTime(clock_.WallNow());
  Json lease = *got;
  Json& spec = lease["spec"];
  spec["holderIdentity"] = "";
  spec["leaseDurationSeconds"] = 1;
  spec["acquireTime"] = wall;
  spec["renewTime"] = wall;
  StatusOr<Json> released = client_->Update(path_, lease);
  if (!released.ok()) {
    TESSERA_LOG(kWarn, kK8s, "lease %s: not released: %s", path_.c_str(),
                released.status().ToString().c_str());
    return;
  }
  Observe(*released, clock_.Now());
}

void LeaderElector::Run(std::stop_token stop) {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<std::int64_t> jitter(0, options_.retry_period.count() / 5);
  Clock::TimePoint lead_until{};
  while (!stop.stop_requested()) {
    const Clock::TimePoint start = clock_.Now();
    const Attempt attempt = TryAcquireOrRenew();
    if (attempt == Attempt::kHeld) {
      // Leader until renew_deadline after the start of this round: every candidate saw the
      // previous version of the Lease before it, so none can see it expire earlier.
      lead_until = start + options_.renew_deadline;
      if (clock_.Now() >= lead_until) {
        if (leading_) StopLeading("the renew took longer than the renew deadline");
      } else if (leading_) {
        SetLeaderUntil(lead_until);
      } else {
        StartLeading(lead_until);
      }
    } else if (leading_) {
      if (attempt == Attempt::kNotHeld) {
        StopLeading("the Lease was taken or changed by another writer");
      } else if (clock_.Now() >= lead_until) {
        StopLeading("no successful renew within the renew deadline");
      }
    }
    Clock::TimePoint next = start + options_.retry_period;
    if (!leading_) next += milliseconds(jitter(rng));  // candidates spread out
    clock_.SleepUntil(next, stop);
  }
  if (leading_) {
    leader_until_ns_.store(kNotLeading, std::memory_order_release);  // before anyone can take it
    if (options_.release_on_cancel) Release();
    StopLeading("stopped");
  }
}

}  // namespace tessera::k8s
