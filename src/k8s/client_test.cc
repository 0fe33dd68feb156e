// Behaviour of Client against a local scripted API server (k8s_testing.h): requests, errors,
// pagination, retries, rate limit, tokens, TLS, watch streaming and stopping.
#include "k8s/client.h"

#include <arpa/inet.h>
#include <atomic>
#include <fstream>
#include <future>
#include <mutex>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>

#include "k8s/k8s_testing.h"
#include "k8s/paths.h"
#include "testutil/status_matchers.h"
#include "testutil/temp_dir.h"

namespace tessera::k8s {
namespace {

using testing::ChunkStream;
using testing::FakeApiServer;
using testing::Pki;

std::string StatusBody(int code, const std::string& reason, const std::string& message) {
  return Json{{"kind", "Status"},   {"apiVersion", "v1"}, {"status", "Failure"},
              {"message", message}, {"reason", reason},   {"code", code}}
      .dump();
}

std::unique_ptr<Client> NewClient(const Config& config) {
  StatusOr<std::unique_ptr<Client>> client = Client::New(config);
  EXPECT_OK(client);
  return client.ok() ? std::move(client).value() : nullptr;
}

struct Seen {
  std::string method, path, body, content_type, authorization, user_agent, accept;
};

TEST(Client, RequestsCarryAuthAgentAndContentTypes) {
  FakeApiServer server;
  std::mutex mu;
  std::vector<Seen> seen;
  auto record = [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back({req.method, req.path, req.body, req.get_header_value("Content-Type"),
                    req.get_header_value("Authorization"), req.get_header_value("User-Agent"),
                    req.get_header_value("Accept")});
    res.status = req.method == "POST" ? 201 : 200;
    res.set_content(R"j({"kind":"ConfigMap","metadata":{"name":"c","resourceVersion":"5"}})j",
                    "application/json");
  };
  const std::string path = "/api/v1/namespaces/ns/configmaps/c";
  server.http().Get(path, record).Put(path, record).Patch(path, record).Delete(path, record);
  server.http().Post("/api/v1/namespaces/ns/configmaps", record);
  ASSERT_OK(server.Start());
  Config config = server.ClientConfig();
  config.bearer_token = "s3cret";
  std::unique_ptr<Client> client = NewClient(config);
  ASSERT_NE(client, nullptr);

  StatusOr<Json> got = client->Get(path);
  ASSERT_OK(got);
  EXPECT_EQ(ResourceVersionOf(*got), "5");
  ASSERT_OK(client->Create(ConfigMapsPath("ns"), Json{{"metadata", {{"name", "c"}}}}));
  ASSERT_OK(client->Update(path, *got));
  ASSERT_OK(client->Patch(path, Json{{"data", {{"a", "b"}}}}, PatchType::kMerge));
  ASSERT_OK(client->Patch(path, Json{{"data", {{"a", "b"}}}}, PatchType::kStrategicMerge));
  ASSERT_OK(client->Patch(path, Json::array({{{"op", "remove"}, {"path", "/data/a"}}}),
                          PatchType::kJson));
  DeleteOptions options;
  options.grace_period_seconds = 0;
  options.precondition_uid = "uid-1";
  ASSERT_OK(client->Delete(path, options));
  ASSERT_OK(client->Delete(path));

  EXPECT_EQ(client->stats().connections, 1);  // one kept-alive connection, reused
  EXPECT_EQ(client->stats().requests, 8);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(seen.size(), 8u);
  for (const Seen& s : seen) {
    EXPECT_EQ(s.authorization, "Bearer s3cret") << s.method;
    EXPECT_EQ(s.user_agent, "tessera-test") << s.method;
    EXPECT_EQ(s.accept, "application/json") << s.method;
  }
  EXPECT_EQ(seen[0].method, "GET");
  EXPECT_EQ(seen[1].method, "POST");
  EXPECT_EQ(seen[1].content_type, "application/json");
  EXPECT_EQ(Json::parse(seen[1].body)["metadata"]["name"], "c");
  EXPECT_EQ(seen[2].method, "PUT");
  EXPECT_EQ(Json::parse(seen[2].body)["metadata"]["resourceVersion"], "5");
  EXPECT_EQ(seen[3].content_type, "application/merge-patch+json");
  EXPECT_EQ(seen[4].content_type, "application/strategic-merge-patch+json");
  EXPECT_EQ(seen[5].content_type, "application/json-patch+json");
  EXPECT_EQ(Json::parse(seen[5].body)[0]["op"], "remove");
  EXPECT_EQ(seen[6].method, "DELETE");
  const Json delete_options = Json::parse(seen[6].body);
  EXPECT_EQ(delete_options["gracePeriodSeconds"], 0);
  EXPECT_EQ(delete_options["preconditions"]["uid"], "uid-1");
  EXPECT_EQ(seen[7].body, "");
}

TEST(Client, ErrorsCarryTheServersStatus) {
  FakeApiServer server;
  server.http().Get(
      "/api/v1/namespaces/ns/pods/x", [](const httplib::Request&, httplib::Response& res) {
        res.status = 404;
        res.set_content(StatusBody(404, "NotFound", "pods \"x\" not found"), "application/json");
      });
  server.http().Post(
      "/api/v1/namespaces/ns/pods", [](const httplib::Request&, httplib::Response& res) {
        res.status = 409;
        res.set_content(StatusBody(409, "AlreadyExists", "pods \"x\" already exists"),
                        "application/json");
      });
  server.http().Get("/notjson", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("<html>", "text/html");
  });
  ASSERT_OK(server.Start());
  std::unique_ptr<Client> client = NewClient(server.ClientConfig());
  ASSERT_NE(client, nullptr);

  StatusOr<Json> missing = client->Get(PodPath("ns", "x"));
  EXPECT_TRUE(IsNotFound(missing.status()));
  EXPECT_EQ(missing.status().message(),
            "GET /api/v1/namespaces/ns/pods/x: 404 NotFound: pods \"x\" not found");
  EXPECT_TRUE(IsAlreadyExists(client->Create(PodsPath("ns"), Json::object()).status()));
  EXPECT_EQ(client->Get("/notjson").status().code(), StatusCode::kDataLoss);

  // Do() returns any HTTP answer as it is.
  StatusOr<HttpResponse> raw = client->Do("GET", PodPath("ns", "x"));
  ASSERT_OK(raw);
  EXPECT_EQ(raw->status, 404);
}

TEST(Client, ManyThreadsShareOneClient) {
  FakeApiServer server;
  std::atomic<int> calls{0};
  server.http().Get(R"(/api/v1/namespaces/ns/pods/(\w+))", [&](const httplib::Request& req,
                                                               httplib::Response& res) {
    ++calls;
    res.set_content(Json{{"metadata", {{"name", req.matches[1]}}}}.dump(), "application/json");
  });
  ASSERT_OK(server.Start());
  Config config = server.ClientConfig();
  config.qps = 1000;  // shared by all threads
  config.burst = 10;
  std::unique_ptr<Client> client = NewClient(config);
  ASSERT_NE(client, nullptr);
  constexpr int kThreads = 6;
  constexpr int kCalls = 25;
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        const std::string name = "p" + std::to_string(t) + "x" + std::to_string(i);
        StatusOr<Json> pod = client->Get(PodPath("ns", name));
        if (!pod.ok() || (*pod)["metadata"]["name"] != name) ++wrong;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(calls.load(), kThreads * kCalls);
  EXPECT_LE(client->stats().connections, kThreads);  // each thread holds at most one
}

TEST(Client, ListFollowsContinueAndEscapesSelectors) {
  FakeApiServer server;
  std::mutex mu;
  std::vector<std::string> queries;
  server.http().Get("/api/v1/pods", [&](const httplib::Request& req, httplib::Response& res) {
    {
      std::lock_guard<std::mutex> lock(mu);
      queries.push_back(req.get_param_value("labelSelector") + "|" + req.get_param_value("limit") +
                        "|" + req.get_param_value("continue") + "|" +
                        req.get_param_value("resourceVersion"));
    }
    const std::string token = req.get_param_value("continue");
    Json page = {{"kind", "PodList"}, {"metadata", {{"resourceVersion", "77"}}}};
    if (token.empty()) {
      page["items"] =
          Json::array({{{"metadata", {{"name", "a"}}}}, {{"metadata", {{"name", "b"}}}}});
      page["metadata"]["continue"] = "tok/1=";
    } else if (token == "tok/1=") {
      page["items"] =
          Json::array({{{"metadata", {{"name", "c"}}}}, {{"metadata", {{"name", "d"}}}}});
      page["metadata"]["continue"] = "tok2";
    } else {
      page["items"] = Json::array({{{"metadata", {{"name", "e"}}}}});
    }
    res.set_content(page.dump(), "application/json");
  });
  ASSERT_OK(server.Start());
  std::unique_ptr<Client> client = NewClient(server.ClientConfig());
  ASSERT_NE(client, nullptr);
  ListOptions options;
  options.label_selector = "app in (x,y),tier!=db";
  options.limit = 2;
  options.resource_version = "0";
  StatusOr<ListResult> list = client->List(PodsPath(""), options);
  ASSERT_OK(list);
  ASSERT_EQ(list->items.size(), 5u);
  EXPECT_EQ(list->items[4]["metadata"]["name"], "e");
  EXPECT_EQ(list->resource_version, "77");
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(queries, (std::vector<std::string>{"app in (x,y),tier!=db|2||0",
                                               "app in (x,y),tier!=db|2|tok/1=|",
                                               "app in (x,y),tier!=db|2|tok2|"}));
}

TEST(Client, TooManyRequestsIsRetriedAfterRetryAfterForAnyVerb) {
  FakeApiServer server;
  std::atomic<int> calls{0};
  server.http().Post(
      "/api/v1/namespaces/ns/pods/p/binding", [&](const httplib::Request&, httplib::Response& res) {
        if (++calls <= 2) {
          res.status = 429;
          res.set_header("Retry-After", "0");
          res.set_content(StatusBody(429, "TooManyRequests", "slow down"), "application/json");
          return;
        }
        res.status = 201;
        res.set_content(R"j({"kind":"Status","status":"Success"})j", "application/json");
      });
  ASSERT_OK(server.Start());
  std::unique_ptr<Client> client = NewClient(server.ClientConfig());
  ASSERT_NE(client, nullptr);
  ASSERT_OK(client->Create(PodBindingPath("ns", "p"), Json::object()));
  EXPECT_EQ(calls.load(), 3);
  EXPECT_EQ(client->stats().throttled, 2);
  EXPECT_EQ(client->stats().retries, 2);
}

// Accepts connections, reads the request head, closes without answering.
class ClosingServer {
 public:
  ClosingServer() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd_, 16) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "ClosingServer: cannot listen";
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (poll(&p, 1, 10) <= 0) continue;
        const int conn = accept(fd_, nullptr, nullptr);
        if (conn < 0) continue;
        ++accepted_;
        char buffer[4096];
        pollfd c{conn, POLLIN, 0};
        if (poll(&c, 1, 2000) > 0) (void)!read(conn, buffer, sizeof(buffer));
        close(conn);
      }
    });
  }
  ~ClosingServer() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int accepted() const { return accepted_.load(); }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

TEST(Client, TransportErrorsAreRetriedOnlyForIdempotentRequests) {
  ClosingServer server;
  Config config;
  config.server = server.url();
  config.qps = 0;
  std::unique_ptr<Client> client = NewClient(config);
  ASSERT_NE(client, nullptr);

  StatusOr<Json> got = client->Get("/api/v1/nodes");
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(server.accepted(), 5);  // kMaxAttempts

  EXPECT_EQ(client->Create("/api/v1/nodes", Json::object()).status().code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(server.accepted(), 6);  // POST: once
  EXPECT_FALSE(client->Patch("/api/v1/nodes/n", Json::object(), PatchType::kMerge).ok());
  EXPECT_EQ(server.accepted(), 7);  // PATCH: once
  EXPECT_FALSE(client->Update("/api/v1/nodes/n", Json{{"metadata", {{"name", "n"}}}}).ok());
  EXPECT_EQ(server.accepted(), 8);  // PUT without resourceVersion: once
  EXPECT_FALSE(
      client->Update("/api/v1/nodes/n", Json{{"metadata", {{"resourceVersion", "3"}}}}).ok());
  EXPECT_EQ(server.accepted(), 13);  // PUT with resourceVersion (compare-and-swap): retried
}

TEST(Client, ARefusedConnectionIsRetriedEvenForPost) {
  // A port nobody listens on: bind, learn the port, close.
  int port = 0;
  {
    ClosingServer gone;
    port = std::stoi(gone.url().substr(gone.url().rfind(':') + 1));
  }
  Config config;
  config.server = "http://127.0.0.1:" + std::to_string(port);
  config.qps = 0;
  std::unique_ptr<Client> client = NewClient(config);
  ASSERT_NE(client, nullptr);
  Status s = client->Create("/api/v1/nodes", Json::object()).status();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("POST /api/v1/nodes: http://127.0.0.1:"), std::string::npos)
      << s.message();
  EXPECT_EQ(client->stats().requests, 5);  // nothing was sent, so POST is safe to repeat
}

TEST(Client, RateLimitWaitIsBoundedByTheTimeout) {
  FakeApiServer server;
  std::atomic<int> calls{0};
  server.http().Get("/api/v1/nodes", [&](const httplib::Request&, httplib::Response& res) {
    ++calls;
    res.set_content(R"j({"items":[]})j", "application/json");
  });
  ASSERT_OK(server.Start());
  Config config = server.ClientConfig();
  config.qps = 0.01;  // one token per 100 s
  config.burst = 1;
  config.timeout = std::chrono::milliseconds(200);
  std::unique_ptr<Client> client = NewClient(config);
  ASSERT_NE(client, nullptr);
  ASSERT_OK(client->Get("/api/v1/nodes"));
  Status limited = client->Get("/api/v1/nodes").status();
  EXPECT_EQ(limited.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(limited.message().find("client-side rate limit"), std::string::npos);
  EXPECT_EQ(calls.load(), 1);
}

TEST(Client, UpdateWithRetryRegetsOnConflict) {
  FakeApiServer server;
  std::mutex mu;
  int rv = 1;
  int gets = 0;
  int puts = 0;
  std::string value = "0";
  bool always_conflict = false;
  const std::string path = ConfigMapPath("ns", "c");
  server.http().Get(path, [&](const httplib::Request&, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    ++gets;
    res.set_content(Json{{"metadata", {{"name", "c"}, {"resourceVersion", std::to_string(rv)}}},
                         {"data", {{"v", value}}}}
                        .dump(),
                    "application/json");
  });
  server.http().Put(path, [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    ++puts;
    const Json body = Json::parse(req.body);
    if (always_conflict || body["metadata"]["resourceVersion"] != std::to_string(rv)) {
      res.status = 409;
      res.set_content(StatusBody(409, "Conflict", "the object has been modified"),
                      "application/json");
      return;
    }
    ++rv;
    value = body["data"]["v"];
    Json stored = body;
    stored["metadata"]["resourceVersion"] = std::to_string(rv);
    res.set_content(stored.dump(), "application/json");
  });
  ASSERT_OK(server.Start());
  std::unique_ptr<Client> client = NewClient(server.ClientConfig());
  ASSERT_NE(client, nullptr);

  int mutations = 0;
  StatusOr<Json> updated = client->UpdateWithRetry(path, [&](Json& object) {
    if (++mutations == 1) {
      std::lock_guard<std::mutex> lock(mu);
      ++rv;  // another writer got in between our GET and PUT
      value = "other";
    }
    object["data"]["v"] = object["data"]["v"].get<std::string>() + "+1";
    return Status::Ok();
  });
  ASSERT_OK(updated);
  EXPECT_EQ(mutations, 2);
  EXPECT_EQ((*updated)["data"]["v"], "other+1");
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(gets, 2);
    EXPECT_EQ(puts, 2);
    always_conflict = true;
  }
  StatusOr<Json> exhausted = client->UpdateWithRetry(
      path, [](Json&) { return Status::Ok(); }, /*attempts=*/3);
  EXPECT_TRUE(IsConflict(exhausted.status()));
  Status refused =
      client->UpdateWithRetry(path, [](Json&) { return FailedPreconditionError("nothing to do"); })
          .status();
  EXPECT_EQ(refused.message(), "nothing to do");
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(puts, 5);
}

TEST(Client, RereadsTheTokenFileAfter401) {
  testutil::TempDir dir;
  const std::string token_file = dir.path() + "/token";
  std::ofstream(token_file) << "old\n";
  FakeApiServer server;
  std::atomic<int> calls{0};
  server.http().Get("/api/v1/nodes", [&](const httplib::Request& req, httplib::Response& res) {
    ++calls;
    if (req.get_header_value("Authorization") != "Bearer new") {
      res.status = 401;
      res.set_content(StatusBody(401, "Unauthorized", "Unauthorized"), "application/json");
      return;
    }
    res.set_content(R"j({"items":[]})j", "application/json");
  });
  ASSERT_OK(server.Start());
  Config config = server.ClientConfig();
  config.token_file = token_file;
  config.bearer_token = "old";
  std::unique_ptr<Client> client = NewClient(config);
  ASSERT_NE(client, nullptr);
  Status unauthenticated = client->Get("/api/v1/nodes").status();
  EXPECT_EQ(unauthenticated.code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(calls.load(), 1);  // the file had nothing newer: no second try

  std::ofstream(token_file) << "new\n";  // rotated by the kubelet
  ASSERT_OK(client->Get("/api/v1/nodes"));
  EXPECT_EQ(calls.load(), 3);  // 401 with the old token, then the new one
}

TEST(Client, TlsWithClientCertificatesFromMemory) {
  StatusOr<Pki> pki = testing::MakePki("ca-one");
  StatusOr<Pki> other = testing::MakePki("ca-two", "IP:127.0.0.1");
  ASSERT_OK(pki);
  ASSERT_OK(other);
  FakeApiServer server(&*pki, /*require_client_cert=*/true);
  server.http().Get("/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"j({"gitVersion":"v1.36.3"})j", "application/json");
  });
  ASSERT_OK(server.Start());
  Config config = server.ClientConfig();
  config.client_cert_pem = pki->client_cert_pem;
  config.client_key_pem = pki->client_key_pem;
  {
    std::unique_ptr<Client> client = NewClient(config);
    ASSERT_NE(client, nullptr);
    StatusOr<Json> version = client->Get("/version");
    ASSERT_OK(version);
    EXPECT_EQ((*version)["gitVersion"], "v1.36.3");
  }
  {
    Config by_name = config;  // the certificate names localhost too
    by_name.server = "https://localhost:" + std::to_string(server.port());
    std::unique_ptr<Client> client = NewClient(by_name);
    ASSERT_NE(client, nullptr);
    EXPECT_OK(client->Get("/version"));
  }
  {
    Config wrong_ca = config;
    wrong_ca.ca_pem = other->ca_pem;
    std::unique_ptr<Client> client = NewClient(wrong_ca);
    ASSERT_NE(client, nullptr);
    Status s = client->Get("/version").status();
    EXPECT_EQ(s.code(), StatusCode::kUnavailable);
    EXPECT_NE(s.message().find("certificate verify failed"), std::string::npos) << s.message();
    EXPECT_EQ(client->stats().requests, 1);  // a TLS failure is not retried

    wrong_ca.insecure_skip_tls_verify = true;
    std::unique_ptr<Client> insecure = NewClient(wrong_ca);
    ASSERT_NE(insecure, nullptr);
    EXPECT_OK(insecure->Get("/version"));
  }
  {
    Config anonymous = config;
    anonymous.client_cert_pem.clear();
    anonymous.client_key_pem.clear();
    std::unique_ptr<Client> client = NewClient(anonymous);
    ASSERT_NE(client, nullptr);
    EXPECT_FALSE(client->Get("/version").ok());  // the server requires a client certificate
  }
  {
    // A server whose certificate does not name "localhost".
    FakeApiServer ip_only(&*other);
    ip_only.http().Get("/version", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("{}", "application/json");
    });
    ASSERT_OK(ip_only.Start());
    Config c = ip_only.ClientConfig();
    EXPECT_OK(NewClient(c)->Get("/version"));
    c.server = "https://localhost:" + std::to_string(ip_only.port());
    Status s = NewClient(c)->Get("/version").status();
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  }
}

TEST(Client, RejectsBadConfiguration) {
  Config config;
  config.server = "ftp://x";
  EXPECT_EQ(Client::New(config).status().code(), StatusCode::kInvalidArgument);
  config.server = "https://[::1";
  EXPECT_FALSE(Client::New(config).ok());
  config.server = "https://h:99999";
  EXPECT_FALSE(Client::New(config).ok());
  config.server = "https://h:6443/prefix/";
  EXPECT_OK(Client::New(config));
  config.ca_pem = "not a certificate";
  EXPECT_NE(Client::New(config).status().message().find("certificate authority: no PEM"),
            std::string::npos);
  StatusOr<Pki> a = testing::MakePki("a");
  StatusOr<Pki> b = testing::MakePki("b");
  ASSERT_OK(a);
  ASSERT_OK(b);
  config.ca_pem = a->ca_pem;
  config.client_cert_pem = a->client_cert_pem;
  config.client_key_pem = b->client_key_pem;
  EXPECT_NE(Client::New(config).status().message().find("do not match"), std::string::npos);
  config.client_key_pem = "garbage";
  EXPECT_NE(Client::New(config).status().message().find("client key"), std::string::npos);
}

TEST(Client, ServerPathPrefixIsKept) {
  FakeApiServer server;
  server.http().Get(
      "/k8s/clusters/c1/api/v1/nodes", [](const httplib::Request&, httplib::Response& res) {
        res.set_content(R"j({"items":[{"metadata":{"name":"n"}}]})j", "application/json");
      });
  ASSERT_OK(server.Start());
  Config config = server.ClientConfig();
  config.server += "/k8s/clusters/c1/";
  std::unique_ptr<Client> client = NewClient(config);
  ASSERT_NE(client, nullptr);
  StatusOr<ListResult> nodes = client->List(NodesPath());
  ASSERT_OK(nodes);
  EXPECT_EQ(nodes->items.size(), 1u);
}

// ---- Watch

std::string Event(const std::string& type, const std::string& name, const std::string& rv) {
  return Json{{"type", type}, {"object", {{"metadata", {{"name", name}, {"resourceVersion", rv}}}}}}
             .dump() +
         "\n";
}

struct WatchFixture {
  FakeApiServer server;
  std::mutex mu;
  std::vector<std::string> queries;
  std::function<void(httplib::Response&)> answer;

  WatchFixture() {
    server.http().Get("/api/v1/pods", [this](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard<std::mutex> lock(mu);
        queries.push_back("watch=" + req.get_param_value("watch") +
                          " rv=" + req.get_param_value("resourceVersion") +
                          " bookmarks=" + req.get_param_value("allowWatchBookmarks") +
                          " timeout=" + req.get_param_value("timeoutSeconds") +
                          " labels=" + req.get_param_value("labelSelector") +
                          " fields=" + req.get_param_value("fieldSelector"));
      }
      answer(res);
    });
    EXPECT_OK(server.Start());
  }
};

TEST(Watch, EventsSplitAcrossChunksArriveInOrder) {
  WatchFixture f;
  auto stream = std::make_shared<ChunkStream>();
  const std::string all =
      Event("ADDED", "a", "11") + Event("MODIFIED", "a", "12") +
      Json{{"type", "BOOKMARK"}, {"object", {{"metadata", {{"resourceVersion", "15"}}}}}}.dump() +
      "\n" + Event("DELETED", "a", "16");
  // Chunks cut inside JSON, inside a key, right after a newline.
  for (std::size_t at = 0; at < all.size(); at += 7) stream->Push(all.substr(at, 7));
  stream->End();
  f.answer = [&](httplib::Response& res) { ChunkStream::Serve(stream, res, f.server); };
  std::unique_ptr<Client> client = NewClient(f.server.ClientConfig());
  ASSERT_NE(client, nullptr);

  WatchOptions options;
  options.resource_version = "10";
  options.timeout_seconds = 300;
  options.label_selector = "a=b";
  options.field_selector = "spec.nodeName=n";
  std::vector<std::string> seen;
  ASSERT_OK(client->Watch(PodsPath(""), options, [&](const WatchEvent& e) {
    seen.push_back(std::string(WatchEventTypeName(e.type)) + " " + ResourceVersionOf(e.object));
    return true;
  }));
  EXPECT_EQ(seen,
            (std::vector<std::string>{"ADDED 11", "MODIFIED 12", "BOOKMARK 15", "DELETED 16"}));
  std::lock_guard<std::mutex> lock(f.mu);
  ASSERT_EQ(f.queries.size(), 1u);
  EXPECT_EQ(f.queries[0],
            "watch=1 rv=10 bookmarks=true timeout=300 labels=a=b fields=spec.nodeName=n");
}

TEST(Watch, ErrorEventWithCode410IsGone) {
  WatchFixture f;
  auto stream = std::make_shared<ChunkStream>();
  stream->Push(Event("ADDED", "a", "11"));
  stream->Push(R"j({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":)j"
               R"j("Failure","message":"too old resource version: 1 (11)","reason":"Expired",)j"
               R"j("code":410}})j"
               "\n");
  stream->Push(Event("ADDED", "never", "12"));
  stream->End();
  f.answer = [&](httplib::Response& res) { ChunkStream::Serve(stream, res, f.server); };
  std::unique_ptr<Client> client = NewClient(f.server.ClientConfig());
  ASSERT_NE(client, nullptr);
  std::vector<std::string> names;
  Status s = client->Watch(PodsPath(""), {}, [&](const WatchEvent& e) {
    names.push_back(e.object["metadata"]["name"]);
    return true;
  });
  EXPECT_TRUE(IsGone(s)) << s.ToString();
  EXPECT_NE(s.message().find("too old resource version"), std::string::npos);
  EXPECT_EQ(names, std::vector<std::string>{"a"});  // the ERROR event is not an event
}

TEST(Watch, HttpErrorsAreMapped) {
  WatchFixture f;
  std::atomic<int> code{410};
  f.answer = [&](httplib::Response& res) {
    res.status = code.load();
    res.set_content(StatusBody(res.status, res.status == 410 ? "Expired" : "Forbidden", "no"),
                    "application/json");
  };
  std::unique_ptr<Client> client = NewClient(f.server.ClientConfig());
  ASSERT_NE(client, nullptr);
  auto never = [](const WatchEvent&) {
    ADD_FAILURE() << "no event expected";
    return true;
  };
  EXPECT_TRUE(IsGone(client->Watch(PodsPath(""), {}, never)));
  code = 403;
  Status forbidden = client->Watch(PodsPath(""), {}, never);
  EXPECT_EQ(forbidden.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(forbidden.message().find("403 Forbidden: no"), std::string::npos)
      << forbidden.message();
}

TEST(Watch, ReturningFalseEndsIt) {
  WatchFixture f;
  auto stream = std::make_shared<ChunkStream>();
  stream->Push(Event("ADDED", "a", "1") + Event("ADDED", "b", "2"));  // then idle, never ended
  f.answer = [&](httplib::Response& res) { ChunkStream::Serve(stream, res, f.server); };
  std::unique_ptr<Client> client = NewClient(f.server.ClientConfig());
  ASSERT_NE(client, nullptr);
  int events = 0;
  EXPECT_OK(client->Watch(PodsPath(""), {}, [&](const WatchEvent&) { return ++events < 2; }));
  EXPECT_EQ(events, 2);
}

// Runs a watch on a thread; the result must come back within `limit` of the stop.
Status WatchThenStop(Client& client, const std::function<bool()>& ready_to_stop) {
  std::stop_source stop;
  std::atomic<int> events{0};
  std::future<Status> result = std::async(std::launch::async, [&] {
    return client.Watch(
        PodsPath(""), {},
        [&](const WatchEvent&) {
          ++events;
          return true;
        },
        stop.get_token());
  });
  EXPECT_TRUE(testing::WaitUntil(ready_to_stop));
  stop.request_stop();
  // A generous bound that only a broken stop can exceed (the stream itself never ends).
  EXPECT_EQ(result.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "Watch did not return after stop";
  return result.get();
}

TEST(Watch, StopEndsAnIdleStreamPromptly) {
  WatchFixture f;
  auto stream = std::make_shared<ChunkStream>();
  stream->Push(Event("ADDED", "a", "1"));  // then idle
  f.answer = [&](httplib::Response& res) { ChunkStream::Serve(stream, res, f.server); };
  std::unique_ptr<Client> client = NewClient(f.server.ClientConfig());
  ASSERT_NE(client, nullptr);
  EXPECT_OK(WatchThenStop(*client, [&] { return stream->served(); }));
}

TEST(Watch, StopWorksBeforeTheServerHasAnswered) {
  WatchFixture f;
  std::atomic<bool> entered{false};
  f.answer = [&](httplib::Response& res) {
    entered = true;
    // Hold the answer (no headers yet) until the server stops.
    while (!f.server.stopping()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    res.status = 500;
  };
  std::unique_ptr<Client> client = NewClient(f.server.ClientConfig());
  ASSERT_NE(client, nullptr);
  EXPECT_OK(WatchThenStop(*client, [&] { return entered.load(); }));
  // Stop requested at once, before or while connecting.
  EXPECT_OK(WatchThenStop(*client, [] { return true; }));
  f.server.Stop();
}

TEST(Watch, OverTlsWithAClientCertificate) {
  StatusOr<Pki> pki = testing::MakePki();
  ASSERT_OK(pki);
  FakeApiServer server(&*pki, /*require_client_cert=*/true);
  auto stream = std::make_shared<ChunkStream>();
  stream->Push(Event("ADDED", "a", "1").substr(0, 10));
  stream->Push(Event("ADDED", "a", "1").substr(10));
  stream->End();
  server.http().Get("/api/v1/pods", [&](const httplib::Request&, httplib::Response& res) {
    ChunkStream::Serve(stream, res, server);
  });
  ASSERT_OK(server.Start());
  Config config = server.ClientConfig();
  config.client_cert_pem = pki->client_cert_pem;
  config.client_key_pem = pki->client_key_pem;
  std::unique_ptr<Client> client = NewClient(config);
  ASSERT_NE(client, nullptr);
  int events = 0;
  EXPECT_OK(client->Watch(PodsPath(""), {}, [&](const WatchEvent&) { return ++events > 0; }));
  EXPECT_EQ(events, 1);
}

}  // namespace
}  // namespace tessera::k8s
