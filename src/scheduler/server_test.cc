#include "scheduler/server.h"

#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "contract/decision.h"
#include "extender/extender.h"
#include "testutil/status_matchers.h"

namespace tessera::scheduler {
namespace {

using nlohmann::json;

// Binds nothing: the requests below never get as far as a bind.
class NoWriter : public extender::PodWriter {
 public:
  Status Bind(const std::string&, const std::string&, const std::string&, const std::string&,
              const std::map<std::string, std::string>&) override {
    return UnavailableError("not in this test");
  }
  StatusOr<std::string> NodeNameOf(const std::string&, const std::string&,
                                   const std::string&) override {
    return std::string();
  }
};

// The extender's HTTP server over a real socket: request bodies are bounded, and a body over
// the bound gets 413 naming the limit, not a hang or unbounded memory.
TEST(SchedulerServer, ARequestBodyOverTheLimitIsRefusedNamingIt) {
  extender::Ledger ledger(policy::DefaultPolicy(), extender::LedgerOptions{});
  NoWriter writer;
  auto signer = contract::Signer::FromPem(*contract::GenerateSigningKeyPem());
  ASSERT_OK(signer);
  extender::Extender ext(&ledger, &writer, &*signer, "test-key", [] { return 1796000000; });
  ext.SetSynced(true);
  Server server(&ext, &ledger, 2);
  auto port = server.Bind("127.0.0.1", 0);
  ASSERT_OK(port);
  std::thread serving([&server] { server.Run(); });
  httplib::Client client("127.0.0.1", *port);
  const std::string big(5u << 20, ' ');
  auto res = client.Post("/filter", big, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  EXPECT_NE(res->body.find("/filter: request body over the limit of 4 MiB"), std::string::npos)
      << res->body;
  // A real request still gets its answer.
  auto ok = client.Post("/filter", json{{"Pod", json::object()}}.dump(), "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  server.Stop();
  serving.join();
}

}  // namespace
}  // namespace tessera::scheduler
