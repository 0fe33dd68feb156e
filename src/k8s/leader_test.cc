// The LeaderElector against a Lease kept by a scripted API server, with injected time: the
// elector's Run() thread parks in the fake clock's SleepUntil() after every round, and the test
// moves time to the end of that sleep (one round per Step()). Nothing depends on real timing.
#include "k8s/leader.h"

#include <condition_variable>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "k8s/k8s_testing.h"
#include "k8s/paths.h"
#include "testutil/fake_clock.h"
#include "testutil/status_matchers.h"

namespace tessera::k8s {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::FakeApiServer;
using testing::WaitUntil;

constexpr char kNs[] = "ns";
constexpr char kName[] = "lock";
constexpr char kMe[] = "me";

using testutil::FakeClock;

// The fake clock's start: steady time 1000 h, wall time 2026-01-01T00:00:00Z.
constexpr Clock::TimePoint kStart{std::chrono::hours(1000)};
constexpr Clock::WallTimePoint kWallStart = FakeClock::kWallStart;

void StatusAnswer(httplib::Response& res, int code, const std::string& reason) {
  res.status = code;
  res.set_content(Json{{"kind", "Status"},
                       {"apiVersion", "v1"},
                       {"status", "Failure"},
                       {"code", code},
                       {"reason", reason},
                       {"message", "scripted " + reason}}
                      .dump(),
                  "application/json");
}

// One Lease (ns/lock), stored with API server semantics: create fails if it exists, a PUT
// with a stale resourceVersion gets 409 Conflict, every write gets a new resourceVersion.
// Scriptable: fail every request (500), hang GETs, one 409 on the next PUT, a rival who creates
// the Lease just before our POST.
class FakeLeases {
 public:
  FakeLeases() {
    server_.http().Get(LeasePath(kNs, kName),
                       [this](const httplib::Request&, httplib::Response& res) {
                         std::unique_lock<std::mutex> lock(mu_);
                         ++gets_;
                         if (hang_) {
                           ++hanging_;
                           cv_.wait(lock, [&] { return !hang_ || server_.stopping(); });
                           --hanging_;
                         }
                         if (failing_) return StatusAnswer(res, 500, "InternalError");
                         if (!lease_) return StatusAnswer(res, 404, "NotFound");
                         res.set_content(lease_->dump(), "application/json");
                       });
    server_.http().Post(LeasesPath(kNs),
                        [this](const httplib::Request& req, httplib::Response& res) {
                          std::lock_guard<std::mutex> lock(mu_);
                          ++posts_;
                          if (failing_) return StatusAnswer(res, 500, "InternalError");
                          if (rival_creates_) {
                            rival_creates_ = false;
                            StoreLocked(Lease("rival", "2026-01-01T00:00:00.000000Z", 15, 0));
                          }
                          if (lease_) return StatusAnswer(res, 409, "AlreadyExists");
                          StoreLocked(Json::parse(req.body));
                          res.status = 201;
                          res.set_content(lease_->dump(), "application/json");
                        });
    server_.http().Put(LeasePath(kNs, kName), [this](const httplib::Request& req,
                                                     httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      ++puts_;
      if (failing_) return StatusAnswer(res, 500, "InternalError");
      const Json body = Json::parse(req.body);
      if (conflict_next_put_ || !lease_ || ResourceVersionOf(body) != ResourceVersionOf(*lease_)) {
        conflict_next_put_ = false;
        return StatusAnswer(res, 409, "Conflict");
      }
      StoreLocked(body);
      res.set_content(lease_->dump(), "application/json");
    });
    EXPECT_OK(server_.Start());
  }
  ~FakeLeases() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      hang_ = false;
    }
    cv_.notify_all();
    server_.Stop();
  }

  static Json Lease(const std::string& holder, const std::string& renew_time, int duration,
                    int transitions) {
    return {{"apiVersion", "coordination.k8s.io/v1"},
            {"kind", "Lease"},
            {"metadata", {{"name", kName}, {"namespace", kNs}}},
            {"spec",
             {{"holderIdentity", holder},
              {"leaseDurationSeconds", duration},
              {"acquireTime", renew_time},
              {"renewTime", renew_time},
              {"leaseTransitions", transitions}}}};
  }

  Config ClientConfig() const { return server_.ClientConfig(); }

  void Store(Json lease) {
    std::lock_guard<std::mutex> lock(mu_);
    StoreLocked(std::move(lease));
  }
  // Another holder's renewal: a new renewTime (and so a new resourceVersion).
  void RenewAs(const std::string& holder, const std::string& renew_time) {
    std::lock_guard<std::mutex> lock(mu_);
    Json lease = *lease_;
    lease["spec"]["holderIdentity"] = holder;
    lease["spec"]["renewTime"] = renew_time;
    StoreLocked(std::move(lease));
  }
  std::optional<Json> lease() {
    std::lock_guard<std::mutex> lock(mu_);
    return lease_;
  }
  Json spec() { return lease().value_or(Json::object()).value("spec", Json::object()); }

  void SetFailing(bool failing) {
    std::lock_guard<std::mutex> lock(mu_);
    failing_ = failing;
  }
  void SetHang(bool hang) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      hang_ = hang;
    }
    cv_.notify_all();
  }
  void ConflictOnNextPut() {
    std::lock_guard<std::mutex> lock(mu_);
    conflict_next_put_ = true;
  }
  void RivalCreatesFirst() {
    std::lock_guard<std::mutex> lock(mu_);
    rival_creates_ = true;
  }
  int hanging() {
    std::lock_guard<std::mutex> lock(mu_);
    return hanging_;
  }
  int puts() {
    std::lock_guard<std::mutex> lock(mu_);
    return puts_;
  }
  int posts() {
    std::lock_guard<std::mutex> lock(mu_);
    return posts_;
  }

 private:
  void StoreLocked(Json lease) {
    lease["metadata"]["resourceVersion"] = std::to_string(++version_);
    lease_ = std::move(lease);
  }

  FakeApiServer server_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Json> lease_;
  int version_ = 100;
  bool failing_ = false;
  bool hang_ = false;
  int hanging_ = 0;
  bool conflict_next_put_ = false;
  bool rival_creates_ = false;
  int gets_ = 0;
  int posts_ = 0;
  int puts_ = 0;
};

class LeaderTest : public ::testing::Test {
 protected:
  ~LeaderTest() override { Stop(); }

  LeaderElectorOptions Options() {
    LeaderElectorOptions options;
    options.ns = kNs;
    options.lease_name = kName;
    options.identity = kMe;
    options.clock = &clock_;
    options.on_started_leading = [this] { Record("started"); };
    options.on_stopped_leading = [this] { Record("stopped"); };
    options.on_new_leader = [this](const std::string& id) { Record("leader:" + id); };
    return options;
  }

  // Starts Run() and waits for the end of its first round.
  void Start(LeaderElectorOptions options) {
    StatusOr<std::unique_ptr<LeaderElector>> elector =
        LeaderElector::New(leases_.ClientConfig(), std::move(options));
    ASSERT_OK(elector);
    elector_ = std::move(elector).value();
    runner_ = std::jthread([this](std::stop_token stop) { elector_->Run(stop); });
    ASSERT_TRUE(WaitForSleep(1));
  }
  void Start() { Start(Options()); }

  // Ends the current sleep and waits for the next round to finish.
  bool Step() {
    const int before = clock_.sleeps();
    clock_.WakeSleeper();
    return WaitForSleep(before + 1);
  }
  bool WaitForSleep(int n) {
    return WaitUntil([&] { return clock_.sleeps() >= n && clock_.sleeping(); });
  }

  void Stop() {
    if (runner_.joinable()) {
      runner_.request_stop();
      runner_.join();
    }
  }

  void Record(std::string event) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
  }
  std::vector<std::string> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }

  FakeLeases leases_;
  FakeClock clock_{kStart};
  std::unique_ptr<LeaderElector> elector_;
  std::jthread runner_;
  std::mutex mu_;
  std::vector<std::string> events_;
};

using Events = std::vector<std::string>;

TEST(LeaderElection, FormatsMicroTime) {
  EXPECT_EQ(FormatMicroTime(kWallStart), "2026-01-01T00:00:00.000000Z");
  EXPECT_EQ(FormatMicroTime(
                std::chrono::system_clock::time_point(std::chrono::microseconds(1700000000123456))),
            "2023-11-14T22:13:20.123456Z");
}

TEST(LeaderElection, DefaultIdentityIsHostnameAndARandomSuffix) {
  const std::string a = DefaultLeaderIdentity();
  const std::string b = DefaultLeaderIdentity();
  EXPECT_TRUE(std::regex_match(a, std::regex(".+_[0-9a-f]{16}"))) << a;
  EXPECT_NE(a, b);
  EXPECT_EQ(a.substr(0, a.size() - 16), b.substr(0, b.size() - 16));
}

TEST(LeaderElection, RefusesInconsistentOptions) {
  Config config;
  config.server = "https://127.0.0.1:1";
  LeaderElectorOptions options;
  options.ns = kNs;
  options.lease_name = kName;
  EXPECT_OK(LeaderElector::New(config, options));
  EXPECT_FALSE(LeaderElector::New(config, options).value()->identity().empty());

  LeaderElectorOptions no_name = options;
  no_name.lease_name.clear();
  EXPECT_EQ(LeaderElector::New(config, no_name).status().code(), StatusCode::kInvalidArgument);
  LeaderElectorOptions deadline_too_long = options;
  deadline_too_long.renew_deadline = seconds(15);  // == lease_duration
  EXPECT_EQ(LeaderElector::New(config, deadline_too_long).status().code(),
            StatusCode::kInvalidArgument);
  LeaderElectorOptions retry_too_long = options;
  retry_too_long.retry_period = seconds(10);  // == renew_deadline
  EXPECT_EQ(LeaderElector::New(config, retry_too_long).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(LeaderTest, AcquiresAFreeLeaseAndRenewsIt) {
  Start();
  EXPECT_TRUE(elector_->IsLeader());
  EXPECT_EQ(elector_->LeaderIdentity(), kMe);
  EXPECT_EQ(events(), (Events{"leader:me", "started"}));
  EXPECT_EQ(leases_.posts(), 1);
  Json spec = leases_.spec();
  EXPECT_EQ(spec["holderIdentity"], kMe);
  EXPECT_EQ(spec["leaseDurationSeconds"], 15);
  EXPECT_EQ(spec["acquireTime"], "2026-01-01T00:00:00.000000Z");
  EXPECT_EQ(spec["renewTime"], "2026-01-01T00:00:00.000000Z");
  EXPECT_EQ(spec["leaseTransitions"], 0);

  // The leader renews every retry period (2 s, no jitter).
  ASSERT_TRUE(Step());
  ASSERT_TRUE(Step());
  EXPECT_EQ(clock_.Elapsed(), seconds(4));
  EXPECT_TRUE(elector_->IsLeader());
  spec = leases_.spec();
  EXPECT_EQ(spec["renewTime"], "2026-01-01T00:00:04.000000Z");
  EXPECT_EQ(spec["acquireTime"], "2026-01-01T00:00:00.000000Z");
  EXPECT_EQ(spec["leaseTransitions"], 0);
  EXPECT_EQ(leases_.puts(), 2);
  EXPECT_EQ(events(), (Events{"leader:me", "started"}));
}

TEST_F(LeaderTest, DoesNotTakeALiveLeaseOfAnotherHolder) {
  // Its renewTime is decades old by the wall clock: not trusted, only changes seen count.
  leases_.Store(FakeLeases::Lease("other", "2000-01-01T00:00:00.000000Z", 15, 3));
  Start();
  EXPECT_FALSE(elector_->IsLeader());
  EXPECT_EQ(elector_->LeaderIdentity(), "other");
  // The other renews every 5 s (by its clock, whose wall time is off): over a minute, we
  // never write.
  auto next_renew = clock_.Elapsed() + seconds(5);
  int renewals = 0;
  while (clock_.Elapsed() < seconds(60)) {
    if (clock_.Elapsed() >= next_renew) {
      leases_.RenewAs("other", FormatMicroTime(std::chrono::system_clock::time_point(
                                   seconds(946684800 + 5 * ++renewals))));  // 2000-01-01 + n*5s
      next_renew += seconds(5);
    }
    ASSERT_TRUE(Step());
    ASSERT_FALSE(elector_->IsLeader()) << "at " << clock_.Elapsed().count() << " ns";
  }
  EXPECT_EQ(leases_.puts(), 0);
  EXPECT_EQ(leases_.posts(), 0);
  EXPECT_EQ(leases_.spec()["holderIdentity"], "other");
  EXPECT_EQ(events(), (Events{"leader:other"}));
}

TEST_F(LeaderTest, TakesOverALeaseOnceItStopsChangingForItsDuration) {
  leases_.Store(FakeLeases::Lease("other", "2026-01-01T00:00:00.000000Z", 15, 3));
  Start();
  // The other renews once, a few seconds in: the expiry counts from when we see that.
  while (clock_.Elapsed() < seconds(6)) ASSERT_TRUE(Step());
  leases_.RenewAs("other", "2026-01-01T00:00:06.000000Z");
  ASSERT_TRUE(Step());
  const auto seen = clock_.Elapsed();
  EXPECT_FALSE(elector_->IsLeader());
  for (;;) {
    ASSERT_TRUE(Step());
    if (clock_.Elapsed() < seen + seconds(15)) {
      ASSERT_FALSE(elector_->IsLeader()) << "at " << clock_.Elapsed().count() << " ns";
      ASSERT_EQ(leases_.puts(), 0);
      continue;
    }
    break;  // the first round at or after seen + 15 s takes it
  }
  EXPECT_TRUE(elector_->IsLeader());
  EXPECT_EQ(events(), (Events{"leader:other", "leader:me", "started"}));
  const Json spec = leases_.spec();
  EXPECT_EQ(spec["holderIdentity"], kMe);
  EXPECT_EQ(spec["leaseTransitions"], 4);
  EXPECT_EQ(spec["acquireTime"], spec["renewTime"]);
  EXPECT_EQ(spec["acquireTime"], FormatMicroTime(clock_.WallNow()));
}

TEST_F(LeaderTest, TakesAReleasedLeaseAtOnce) {
  leases_.Store(FakeLeases::Lease("", "2026-01-01T00:00:00.000000Z", 1, 2));
  Start();
  EXPECT_TRUE(elector_->IsLeader());
  EXPECT_EQ(leases_.spec()["leaseTransitions"], 3);
  EXPECT_EQ(leases_.spec()["leaseDurationSeconds"], 15);
}

TEST_F(LeaderTest, StopsLeadingWhenRenewsFailPastTheDeadline) {
  Start();
  ASSERT_TRUE(elector_->IsLeader());
  const auto acquired = clock_.Elapsed();
  leases_.SetFailing(true);
  // Renews at +2, +4, +6, +8 s fail and it still leads; the one at +10 s (the deadline) ends it.
  while (clock_.Elapsed() < acquired + seconds(10)) {
    ASSERT_TRUE(elector_->IsLeader()) << "at " << clock_.Elapsed().count() << " ns";
    ASSERT_TRUE(Step());
  }
  EXPECT_FALSE(elector_->IsLeader());
  EXPECT_EQ(events(), (Events{"leader:me", "started", "stopped"}));
  // The Lease still names us and nobody took it: the next good round leads again.
  leases_.SetFailing(false);
  ASSERT_TRUE(Step());
  EXPECT_TRUE(elector_->IsLeader());
  EXPECT_EQ(events(), (Events{"leader:me", "started", "stopped", "started"}));
  EXPECT_EQ(leases_.spec()["leaseTransitions"], 0);
}

TEST_F(LeaderTest, IsLeaderTurnsFalseAtTheDeadlineWhileARenewHangs) {
  Start();
  const auto acquired = clock_.Elapsed();
  leases_.SetHang(true);
  clock_.WakeSleeper();  // the renew at +2 s starts and its GET hangs
  ASSERT_TRUE(WaitUntil([&] { return leases_.hanging() == 1; }));
  clock_.Advance(acquired + seconds(10) - clock_.Elapsed() - milliseconds(1));
  EXPECT_TRUE(elector_->IsLeader());
  clock_.Advance(milliseconds(1));  // acquired + 10 s: the renew deadline
  EXPECT_FALSE(elector_->IsLeader());
  EXPECT_EQ(events(), (Events{"leader:me", "started"}));  // the Run() thread is still stuck
  leases_.SetFailing(true);
  leases_.SetHang(false);
  ASSERT_TRUE(WaitForSleep(2));
  EXPECT_FALSE(elector_->IsLeader());
  EXPECT_EQ(events(), (Events{"leader:me", "started", "stopped"}));
}

TEST_F(LeaderTest, AConflictOnUpdateMeansNotLeader) {
  // A candidate whose takeover PUT meets 409 (someone wrote in between) does not lead.
  leases_.Store(FakeLeases::Lease("", "2026-01-01T00:00:00.000000Z", 1, 0));
  leases_.ConflictOnNextPut();
  Start();
  EXPECT_FALSE(elector_->IsLeader());
  EXPECT_EQ(events(), Events{});
  ASSERT_TRUE(Step());
  EXPECT_TRUE(elector_->IsLeader());
  EXPECT_EQ(events(), (Events{"leader:me", "started"}));

  // A leader whose renew meets 409 stops leading at once.
  leases_.ConflictOnNextPut();
  ASSERT_TRUE(Step());
  EXPECT_FALSE(elector_->IsLeader());
  EXPECT_EQ(events(), (Events{"leader:me", "started", "stopped"}));
}

TEST_F(LeaderTest, ACreateThatMeetsAlreadyExistsMeansAnotherWon) {
  leases_.RivalCreatesFirst();
  Start();
  EXPECT_FALSE(elector_->IsLeader());
  EXPECT_EQ(leases_.posts(), 1);
  ASSERT_TRUE(Step());
  EXPECT_FALSE(elector_->IsLeader());
  EXPECT_EQ(elector_->LeaderIdentity(), "rival");
  EXPECT_EQ(leases_.puts(), 0);
  EXPECT_EQ(events(), (Events{"leader:rival"}));
}

TEST_F(LeaderTest, ALeaderThatSeesAnotherHolderStopsLeading) {
  Start();
  ASSERT_TRUE(elector_->IsLeader());
  leases_.RenewAs("intruder", "2026-01-01T00:00:01.000000Z");
  ASSERT_TRUE(Step());
  EXPECT_FALSE(elector_->IsLeader());
  EXPECT_EQ(events(), (Events{"leader:me", "started", "leader:intruder", "stopped"}));
}

TEST_F(LeaderTest, ReleasesTheLeaseOnStop) {
  Start();
  ASSERT_TRUE(Step());
  ASSERT_TRUE(elector_->IsLeader());
  Stop();
  EXPECT_FALSE(elector_->IsLeader());
  const Json spec = leases_.spec();
  EXPECT_EQ(spec["holderIdentity"], "");
  EXPECT_EQ(spec["leaseDurationSeconds"], 1);
  EXPECT_EQ(spec["leaseTransitions"], 0);
  // Released (the holder became "") before the callback.
  EXPECT_EQ(events(), (Events{"leader:me", "started", "leader:", "stopped"}));
}

TEST_F(LeaderTest, WithoutReleaseTheLeaseIsLeftToExpire) {
  LeaderElectorOptions options = Options();
  options.release_on_cancel = false;
  Start(std::move(options));
  ASSERT_TRUE(elector_->IsLeader());
  const int puts = leases_.puts();
  Stop();
  EXPECT_FALSE(elector_->IsLeader());
  EXPECT_EQ(leases_.spec()["holderIdentity"], kMe);
  EXPECT_EQ(leases_.puts(), puts);
  EXPECT_EQ(events(), (Events{"leader:me", "started", "stopped"}));
}

TEST_F(LeaderTest, ACandidateStopsWithoutWriting) {
  leases_.Store(FakeLeases::Lease("other", "2026-01-01T00:00:00.000000Z", 15, 0));
  Start();
  Stop();
  EXPECT_EQ(leases_.puts(), 0);
  EXPECT_EQ(leases_.spec()["holderIdentity"], "other");
  EXPECT_EQ(events(), (Events{"leader:other"}));
}

}  // namespace
}  // namespace tessera::k8s
