// The client against the real control plane (kube-apiserver 1.36 + etcd + kube-scheduler from
// test/e2e/harness, started once for this binary). Needs TESSERA_TESTCLUSTER; fails without.
//
// The API server runs with --etcd-compaction-interval=2s and without a watch cache for
// podtemplates, so that a resourceVersion really becomes too old (with the watch cache on, a
// fresh server still has every event since it started, and nothing expires).
#include <algorithm>
#include <atomic>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "e2e/testcluster.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "k8s/k8s_testing.h"
#include "k8s/leader.h"
#include "k8s/paths.h"
#include "k8s/reflector.h"
#include "testutil/status_matchers.h"

namespace tessera::k8s {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using SteadyClock = std::chrono::steady_clock;

class K8sE2e : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    e2e::TestClusterOptions options;
    options.extra_args = {"--apiserver-arg=--etcd-compaction-interval=2s",
                          "--apiserver-arg=--watch-cache-sizes=podtemplates#0"};
    StatusOr<std::unique_ptr<e2e::TestCluster>> cluster = e2e::TestCluster::Start(options);
    if (!cluster.ok()) {
      *start_error_ = cluster.status().ToString();
      return;
    }
    cluster_ = std::move(cluster).value().release();
    StatusOr<Config> config = LoadKubeconfig(cluster_->kubeconfig());
    if (!config.ok()) {
      *start_error_ = config.status().ToString();
      return;
    }
    *config_ = *config;
    StatusOr<std::unique_ptr<Client>> client = Client::New(*config);
    if (!client.ok()) {
      *start_error_ = client.status().ToString();
      return;
    }
    client_ = std::move(client).value().release();
  }

  static void TearDownTestSuite() {
    delete client_;
    client_ = nullptr;
    delete cluster_;  // SIGTERM, wait; the folder stays if a test failed
    cluster_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(client_, nullptr) << "the real control plane did not start: " << *start_error_;
  }

  Client& client() { return *client_; }
  const Config& config() { return *config_; }

  // A fresh namespace "<base>-<n>" with the "default" ServiceAccount (no controller-manager
  // runs to create it, and pods need it). Unique per run: --gtest_repeat works on one cluster.
  std::string MakeNamespace(const std::string& base) {
    const std::string ns = Unique(base);
    EXPECT_OK(client().Create("/api/v1/namespaces", Json{{"metadata", {{"name", ns}}}}));
    EXPECT_OK(client().Create("/api/v1/namespaces/" + ns + "/serviceaccounts",
                              Json{{"metadata", {{"name", "default"}}}}));
    return ns;
  }
  static std::string Unique(const std::string& base) {
    static int counter = 0;
    return base + "-" + std::to_string(++counter);
  }

  static Json ConfigMap(const std::string& name, const std::string& value) {
    return {{"apiVersion", "v1"},
            {"kind", "ConfigMap"},
            {"metadata", {{"name", name}, {"labels", {{"app", "e2e"}}}}},
            {"data", {{"v", value}}}};
  }

  // A pod no scheduler picks up (its schedulerName is nobody's).
  static Json Pod(const std::string& name) {
    return {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", name}}},
            {"spec",
             {{"schedulerName", "tessera-e2e-nobody"},
              {"containers",
               {{{"name", "c"},
                 {"image", "registry.invalid/never-pulled:0"},
                 {"resources", {{"requests", {{"cpu", "100m"}}}}}}}}}}};
  }

  static inline e2e::TestCluster* cluster_ = nullptr;
  static inline Client* client_ = nullptr;
  static inline Config* config_ = new Config();
  static inline std::string* start_error_ = new std::string();
};

class Recorder : public ReflectorHandler {
 public:
  void OnSync(std::vector<Json> items, const std::string& rv) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++syncs_;
    last_sync_.clear();
    for (const Json& item : items) last_sync_.push_back(item["metadata"]["name"]);
    sync_rvs_.push_back(rv);
  }
  void OnEvent(WatchEventType type, const Json& object) override {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::string(WatchEventTypeName(type)) + " " +
                      object["metadata"]["name"].get<std::string>());
  }
  std::vector<std::string> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  std::vector<std::string> last_sync() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_sync_;
  }
  int syncs() {
    std::lock_guard<std::mutex> lock(mu_);
    return syncs_;
  }

 private:
  std::mutex mu_;
  int syncs_ = 0;
  std::vector<std::string> last_sync_;
  std::vector<std::string> sync_rvs_;
  std::vector<std::string> events_;
};

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST_F(K8sE2e, AuthenticatesWithEmbeddedClientCertificatesOverTls) {
  // The harness's kubeconfig embeds the CA and an admin client certificate (O=system:masters).
  EXPECT_EQ(config().server.rfind("https://127.0.0.1:", 0), 0u) << config().server;
  EXPECT_FALSE(config().ca_pem.empty());
  EXPECT_FALSE(config().client_cert_pem.empty());
  EXPECT_EQ(config().ns, "default");
  StatusOr<Json> version = client().Get("/version");
  ASSERT_OK(version);
  EXPECT_EQ((*version)["gitVersion"].get<std::string>().rfind("v1.36", 0), 0u) << *version;

  // Who the API server thinks we are: the certificate's identity.
  StatusOr<Json> review = client().Create(
      "/apis/authentication.k8s.io/v1/selfsubjectreviews",
      Json{{"apiVersion", "authentication.k8s.io/v1"}, {"kind", "SelfSubjectReview"}});
  ASSERT_OK(review);
  const Json groups = (*review)["status"]["userInfo"]["groups"];
  EXPECT_NE(std::find(groups.begin(), groups.end(), "system:masters"), groups.end()) << *review;

  // Another CA: the server's certificate is refused, nothing is retried.
  StatusOr<testing::Pki> other = testing::MakePki("not-the-cluster-ca");
  ASSERT_OK(other);
  Config wrong_ca = config();
  wrong_ca.ca_pem = other->ca_pem;
  Status refused = Client::New(wrong_ca).value()->Get("/version").status();
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable);
  EXPECT_NE(refused.message().find("certificate verify failed"), std::string::npos)
      << refused.message();

  // No client certificate: anonymous, which RBAC does not let list namespaces.
  Config anonymous = config();
  anonymous.client_cert_pem.clear();
  anonymous.client_key_pem.clear();
  Status denied = Client::New(anonymous).value()->Get("/api/v1/namespaces").status();
  EXPECT_TRUE(denied.code() == StatusCode::kPermissionDenied ||
              denied.code() == StatusCode::kUnauthenticated)
      << denied.ToString();
}

TEST_F(K8sE2e, CreateGetListWithPaginationAndDelete) {
  const std::string ns = MakeNamespace("e2e-list");
  for (int i = 0; i < 5; ++i) {
    ASSERT_OK(client().Create(ConfigMapsPath(ns),
                              ConfigMap("cm-" + std::to_string(i), std::to_string(i))));
  }
  EXPECT_TRUE(
      IsAlreadyExists(client().Create(ConfigMapsPath(ns), ConfigMap("cm-0", "again")).status()));

  // The server really pages: 2 items and a continue token.
  StatusOr<HttpResponse> first =
      client().Do("GET", ConfigMapsPath(ns) + "?limit=2&labelSelector=app%3De2e");
  ASSERT_OK(first);
  ASSERT_EQ(first->status, 200);
  const Json page = Json::parse(first->body);
  EXPECT_EQ(page["items"].size(), 2u);
  EXPECT_FALSE(page["metadata"].value("continue", "").empty());

  ListOptions options;
  options.limit = 2;
  options.label_selector = "app=e2e";
  const ClientStats before = client().stats();
  StatusOr<ListResult> list = client().List(ConfigMapsPath(ns), options);
  ASSERT_OK(list);
  EXPECT_EQ(client().stats().requests - before.requests, 3);  // pages of 2, 2, 1
  std::vector<std::string> names;
  for (const Json& item : list->items) names.push_back(item["metadata"]["name"]);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"cm-0", "cm-1", "cm-2", "cm-3", "cm-4"}));
  EXPECT_FALSE(list->resource_version.empty());

  StatusOr<Json> got = client().Get(ConfigMapPath(ns, "cm-3"));
  ASSERT_OK(got);
  EXPECT_EQ((*got)["data"]["v"], "3");
  ASSERT_OK(client().Delete(ConfigMapPath(ns, "cm-3")));
  StatusOr<Json> gone = client().Get(ConfigMapPath(ns, "cm-3"));
  EXPECT_TRUE(IsNotFound(gone.status())) << gone.status().ToString();
  EXPECT_NE(gone.status().message().find("configmaps \"cm-3\" not found"), std::string::npos);
}

TEST_F(K8sE2e, MergeStrategicMergeAndJsonPatchesOfAPod) {
  const std::string ns = MakeNamespace("e2e-patch");
  const std::string path = PodPath(ns, "p");
  ASSERT_OK(client().Create(PodsPath(ns), Pod("p")));

  ASSERT_OK(client().Patch(
      path, Json{{"metadata", {{"annotations", {{"tessera.dev/a", "1"}, {"tessera.dev/b", "2"}}}}}},
      PatchType::kMerge));
  // Strategic merge: null deletes a key, containers merge by name.
  StatusOr<Json> patched = client().Patch(
      path,
      Json{{"metadata", {{"annotations", {{"tessera.dev/b", nullptr}, {"tessera.dev/c", "3"}}}}},
           {"spec", {{"containers", {{{"name", "c"}, {"image", "registry.invalid/other:1"}}}}}}},
      PatchType::kStrategicMerge);
  ASSERT_OK(patched);
  const Json annotations = (*patched)["metadata"]["annotations"];
  EXPECT_EQ(annotations.value("tessera.dev/a", ""), "1");
  EXPECT_FALSE(annotations.contains("tessera.dev/b"));
  EXPECT_EQ(annotations.value("tessera.dev/c", ""), "3");
  ASSERT_EQ((*patched)["spec"]["containers"].size(), 1u);
  EXPECT_EQ((*patched)["spec"]["containers"][0]["image"], "registry.invalid/other:1");
  // ... the container kept its requests: it was merged, not replaced.
  EXPECT_EQ((*patched)["spec"]["containers"][0]["resources"]["requests"]["cpu"], "100m");

  // A merge patch replaces the list: the pod would lose its requests, which the API refuses.
  Status replaced =
      client()
          .Patch(path,
                 Json{{"spec",
                       {{"containers", {{{"name", "c"}, {"image", "registry.invalid/x:2"}}}}}}},
                 PatchType::kMerge)
          .status();
  EXPECT_EQ(replaced.code(), StatusCode::kInvalidArgument) << replaced.ToString();

  // JSON patch, and its test operation.
  StatusOr<Json> json_patched = client().Patch(
      path,
      Json::array(
          {{{"op", "test"}, {"path", "/metadata/annotations/tessera.dev~1a"}, {"value", "1"}},
           {{"op", "add"}, {"path", "/metadata/annotations/tessera.dev~1d"}, {"value", "4"}}}),
      PatchType::kJson);
  ASSERT_OK(json_patched);
  EXPECT_EQ((*json_patched)["metadata"]["annotations"].value("tessera.dev/d", ""), "4");
  Status failed_test = client()
                           .Patch(path,
                                  Json::array({{{"op", "test"},
                                                {"path", "/metadata/annotations/tessera.dev~1a"},
                                                {"value", "9"}}}),
                                  PatchType::kJson)
                           .status();
  EXPECT_FALSE(failed_test.ok());
}

TEST_F(K8sE2e, UpdateWithRetryUnderConcurrentWriters) {
  const std::string ns = MakeNamespace("e2e-retry");
  const std::string path = ConfigMapPath(ns, "counter");
  ASSERT_OK(client().Create(ConfigMapsPath(ns), ConfigMap("counter", "0")));
  std::unique_ptr<Client> other = Client::New(config()).value();

  // A writer gets in between our GET and PUT exactly once: the PUT must meet 409 Conflict.
  int mutations = 0;
  StatusOr<Json> updated = client().UpdateWithRetry(path, [&](Json& object) {
    if (++mutations == 1) {
      StatusOr<Json> current = other->Get(path);
      if (!current.ok()) return current.status();
      (*current)["data"]["v"] = "100";
      Status written = other->Update(path, *current).status();
      if (!written.ok()) return written;
    }
    object["data"]["v"] = std::to_string(std::stoi(object["data"]["v"].get<std::string>()) + 1);
    return Status::Ok();
  });
  ASSERT_OK(updated);
  EXPECT_EQ(mutations, 2);  // the 409 path was taken
  EXPECT_EQ((*updated)["data"]["v"], "101");

  // Many writers at once: no increment may be lost.
  constexpr int kThreads = 4;
  constexpr int kIncrements = 5;
  std::atomic<int> attempts{0};
  std::vector<std::thread> writers;
  std::vector<Status> results(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < kIncrements; ++i) {
        Status s = client()
                       .UpdateWithRetry(
                           path,
                           [&](Json& object) {
                             ++attempts;
                             object["data"]["v"] = std::to_string(
                                 std::stoi(object["data"]["v"].get<std::string>()) + 1);
                             return Status::Ok();
                           },
                           /*attempts=*/100)
                       .status();
        if (!s.ok()) results[static_cast<std::size_t>(t)] = s;
      }
    });
  }
  for (std::thread& w : writers) w.join();
  for (const Status& s : results) EXPECT_OK(s);
  StatusOr<Json> final_value = client().Get(path);
  ASSERT_OK(final_value);
  EXPECT_EQ((*final_value)["data"]["v"], std::to_string(101 + kThreads * kIncrements));
  EXPECT_GE(attempts.load(), kThreads * kIncrements);
}

TEST_F(K8sE2e, ReflectorSeesAddedModifiedDeleted) {
  const std::string ns = MakeNamespace("e2e-reflect");
  ASSERT_OK(client().Create(ConfigMapsPath(ns), ConfigMap("before", "0")));
  Recorder recorder;
  Reflector reflector(client(), ConfigMapsPath(ns), recorder);
  std::stop_source stop;
  std::future<void> running =
      std::async(std::launch::async, [&] { reflector.Run(stop.get_token()); });
  ASSERT_TRUE(testing::WaitUntil([&] { return reflector.HasSynced(); }));
  EXPECT_EQ(recorder.last_sync(), std::vector<std::string>{"before"});

  const std::string path = ConfigMapPath(ns, "x");
  ASSERT_OK(client().Create(ConfigMapsPath(ns), ConfigMap("x", "1")));
  ASSERT_OK(client().Patch(path, Json{{"data", {{"v", "2"}}}}, PatchType::kMerge));
  ASSERT_OK(client().Delete(path));
  EXPECT_TRUE(testing::WaitUntil([&] { return recorder.events().size() >= 3; }));
  EXPECT_EQ(recorder.events(), (std::vector<std::string>{"ADDED x", "MODIFIED x", "DELETED x"}));

  stop.request_stop();  // the watch is idle now
  EXPECT_EQ(running.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_EQ(reflector.stats().lists, 1);
  EXPECT_EQ(reflector.stats().gone, 0);
}

TEST_F(K8sE2e, ATooOldResourceVersionIsGoneAndTheReflectorRelists) {
  const std::string ns = MakeNamespace("e2e-old");
  const std::string collection = "/api/v1/namespaces/" + ns + "/podtemplates";
  // Wait until etcd has compacted past revision 1 (the API server compacts every 2 s).
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        StatusOr<HttpResponse> r =
            client().Do("GET", collection + "?resourceVersion=1&resourceVersionMatch=Exact");
        return r.ok() && r->status == 410;
      },
      seconds(60)))
      << "etcd was not compacted";

  WatchOptions old;
  old.resource_version = "1";
  Status watched = client().Watch(collection, old, [](const WatchEvent& e) {
    ADD_FAILURE() << "unexpected event " << WatchEventTypeName(e.type);
    return true;
  });
  EXPECT_TRUE(IsGone(watched)) << watched.ToString();

  Recorder recorder;
  ReflectorOptions options;
  options.initial_backoff = std::chrono::milliseconds(10);
  Reflector reflector(client(), collection, recorder, options);
  reflector.SetNextWatchResourceVersionForTest("1");
  std::stop_source stop;
  std::future<void> running =
      std::async(std::launch::async, [&] { reflector.Run(stop.get_token()); });
  EXPECT_TRUE(testing::WaitUntil([&] { return reflector.stats().lists >= 2; }));
  EXPECT_EQ(reflector.stats().gone, 1);
  // After the relist it watches from a good version and sees new objects.
  Json pod_template = {
      {"metadata", {{"name", "t"}}},
      {"template", {{"spec", {{"containers", {{{"name", "c"}, {"image", "x"}}}}}}}}};
  ASSERT_OK(client().Create(collection, pod_template));
  EXPECT_TRUE(testing::WaitUntil([&] { return Contains(recorder.events(), "ADDED t"); }));
  stop.request_stop();
  EXPECT_EQ(running.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_EQ(recorder.syncs(), 2);
}

TEST_F(K8sE2e, BindsAPodToANode) {
  const std::string ns = MakeNamespace("e2e-bind");
  const std::string node = Unique("e2e-node");
  ASSERT_OK(client().Create(
      NodesPath(), Json{{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", node}}}}));
  ASSERT_OK(client().Create(PodsPath(ns), Pod("p")));
  const Json binding = {{"apiVersion", "v1"},
                        {"kind", "Binding"},
                        {"metadata", {{"name", "p"}}},
                        {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}};
  ASSERT_OK(client().Create(PodBindingPath(ns, "p"), binding));
  StatusOr<Json> pod = client().Get(PodPath(ns, "p"));
  ASSERT_OK(pod);
  EXPECT_EQ((*pod)["spec"]["nodeName"], node);
  // A second binding is a conflict: the pod is already assigned.
  Status again = client().Create(PodBindingPath(ns, "p"), binding).status();
  EXPECT_TRUE(IsConflict(again)) << again.ToString();
  EXPECT_NE(again.message().find("already assigned"), std::string::npos) << again.message();
}

TEST_F(K8sE2e, SimulatedNodesAppearThroughTheLauncher) {
  e2e::SimNodesOptions options;
  options.kubeconfig = cluster_->kubeconfig();
  options.nodes = 3;
  options.gpus_per_node = 2;
  options.gpu_memory = "8Gi";
  const std::string prefix = Unique("e2e-sim") + "-";
  options.prefix = prefix;
  StatusOr<std::unique_ptr<e2e::SimNodes>> sim = e2e::SimNodes::Start(options);
  ASSERT_OK(sim);
  EXPECT_EQ((*sim)->node_names(),
            (std::vector<std::string>{prefix + "000", prefix + "001", prefix + "002"}));
  ListOptions by_name;
  by_name.field_selector = "metadata.name=" + prefix + "001";
  StatusOr<ListResult> nodes = client().List(NodesPath(), by_name);
  ASSERT_OK(nodes);
  ASSERT_EQ(nodes->items.size(), 1u);
  EXPECT_EQ(nodes->items[0]["status"]["capacity"].value("cpu", ""), "128");
  EXPECT_TRUE((*sim)->process().Running());
}

TEST_F(K8sE2e, WatchStopsPromptlyOnAnIdleStream) {
  const std::string ns = MakeNamespace("e2e-idle");
  ASSERT_OK(client().Create(ConfigMapsPath(ns), ConfigMap("ping", "1")));
  std::stop_source stop;
  std::atomic<int> events{0};
  // Without a resourceVersion the watch starts with the current objects (synthetic ADDED
  // events): once "ping" is in, the stream is established, and then idle.
  std::future<Status> watching = std::async(std::launch::async, [&] {
    return client().Watch(
        ConfigMapsPath(ns), {},
        [&](const WatchEvent& e) {
          if (e.type == WatchEventType::kAdded) ++events;
          return true;
        },
        stop.get_token());
  });
  ASSERT_TRUE(testing::WaitUntil([&] { return events.load() > 0; }));
  stop.request_stop();
  EXPECT_EQ(watching.wait_for(seconds(10)), std::future_status::ready);
  EXPECT_OK(watching.get());
}

// One candidate of a leader election with short times (2 s lease, 1.5 s renew deadline, 0.3 s
// retry), running on a thread of its own.
class Candidate {
 public:
  Candidate(const Config& config, const std::string& ns, const std::string& identity,
            bool release_on_cancel) {
    LeaderElectorOptions options;
    options.ns = ns;
    options.lease_name = "tessera-scheduler";
    options.identity = identity;
    options.lease_duration = seconds(2);
    options.renew_deadline = milliseconds(1500);
    options.retry_period = milliseconds(300);
    options.release_on_cancel = release_on_cancel;
    options.on_started_leading = [this] { ++started_; };
    elector_ = LeaderElector::New(config, std::move(options)).value();
    runner_ = std::jthread([this](std::stop_token stop) { elector_->Run(stop); });
  }
  ~Candidate() { Stop(); }
  void Stop() {
    if (runner_.joinable()) {
      runner_.request_stop();
      runner_.join();
    }
  }
  bool IsLeader() const { return elector_->IsLeader(); }
  const std::string& identity() const { return elector_->identity(); }
  int started() const { return started_.load(); }

 private:
  std::unique_ptr<LeaderElector> elector_;
  std::atomic<int> started_{0};
  std::jthread runner_;
};

struct Samples {
  int both = 0;          // samples with two leaders (must stay 0)
  int none = 0;          // samples with none
  int longest_none = 0;  // the longest run of those
};

// Samples IsLeader() of both every 50 ms for `span`.
Samples Sample(const Candidate& a, const Candidate& b, milliseconds span) {
  Samples s;
  int run = 0;
  const auto end = SteadyClock::now() + span;
  while (SteadyClock::now() < end) {
    const int leaders = (a.IsLeader() ? 1 : 0) + (b.IsLeader() ? 1 : 0);
    if (leaders == 2) ++s.both;
    run = leaders == 0 ? run + 1 : 0;
    s.none += leaders == 0 ? 1 : 0;
    s.longest_none = std::max(s.longest_none, run);
    std::this_thread::sleep_for(milliseconds(50));
  }
  return s;
}

TEST_F(K8sE2e, LeaderElectionHasOneLeaderAndHandsOverOnRelease) {
  const std::string ns = MakeNamespace("e2e-leader");
  Candidate a(config(), ns, "replica-a", /*release_on_cancel=*/true);
  Candidate b(config(), ns, "replica-b", /*release_on_cancel=*/true);
  ASSERT_TRUE(testing::WaitUntil([&] { return a.IsLeader() || b.IsLeader(); }, seconds(10)));
  const Samples steady = Sample(a, b, seconds(5));
  EXPECT_EQ(steady.both, 0);
  // A leader whose renews stall past the deadline leaves a gap until the lease expires for the
  // other (0.5 s here); anything near the lease duration means leadership was lost.
  EXPECT_LT(steady.longest_none, 40) << "no leader for " << steady.longest_none * 50 << " ms";
  Candidate& leader = a.IsLeader() ? a : b;
  Candidate& other = a.IsLeader() ? b : a;
  EXPECT_GE(leader.started(), 1);
  StatusOr<Json> lease = client().Get(LeasePath(ns, "tessera-scheduler"));
  ASSERT_OK(lease);
  EXPECT_EQ((*lease)["spec"]["holderIdentity"], leader.identity());
  EXPECT_EQ((*lease)["spec"]["leaseDurationSeconds"], 2);
  const int transitions = (*lease)["spec"].value("leaseTransitions", 0);

  // The leader steps down and empties the holder: the other takes over on its next round.
  const auto stopped = SteadyClock::now();
  leader.Stop();
  EXPECT_FALSE(leader.IsLeader());
  ASSERT_TRUE(testing::WaitUntil([&] { return other.IsLeader(); }, seconds(5)));
  const auto handover = SteadyClock::now() - stopped;
  EXPECT_LT(handover, seconds(2)) << "a released lease waited for its expiry";
  lease = client().Get(LeasePath(ns, "tessera-scheduler"));
  ASSERT_OK(lease);
  EXPECT_EQ((*lease)["spec"]["holderIdentity"], other.identity());
  EXPECT_EQ((*lease)["spec"].value("leaseTransitions", 0), transitions + 1);
}

TEST_F(K8sE2e, LeaderElectionHandsOverAfterTheLeaseDurationWithoutRelease) {
  const std::string ns = MakeNamespace("e2e-leader-kill");
  Candidate a(config(), ns, "replica-a", /*release_on_cancel=*/false);
  Candidate b(config(), ns, "replica-b", /*release_on_cancel=*/false);
  ASSERT_TRUE(testing::WaitUntil([&] { return a.IsLeader() || b.IsLeader(); }, seconds(10)));
  // Let the follower see a few renewals first.
  const Samples steady = Sample(a, b, seconds(1));
  EXPECT_EQ(steady.both, 0);
  Candidate& leader = a.IsLeader() ? a : b;
  Candidate& other = a.IsLeader() ? b : a;
  ASSERT_TRUE(leader.IsLeader());

  // As if the leader's process died: it stops renewing, the Lease still names it.
  const auto killed = SteadyClock::now();
  leader.Stop();
  StatusOr<Json> lease = client().Get(LeasePath(ns, "tessera-scheduler"));
  ASSERT_OK(lease);
  EXPECT_EQ((*lease)["spec"]["holderIdentity"], leader.identity());
  ASSERT_TRUE(testing::WaitUntil([&] { return other.IsLeader(); }, seconds(10)));
  const auto handover = SteadyClock::now() - killed;
  // The other waits for 2 s of silence after the last renewal it saw, which was at most one
  // retry period (plus a request) before the stop.
  EXPECT_GE(handover, milliseconds(1500));
  EXPECT_LT(handover, seconds(5));
  EXPECT_FALSE(leader.IsLeader());
}

}  // namespace
}  // namespace tessera::k8s
