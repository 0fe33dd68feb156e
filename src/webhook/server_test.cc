#include "webhook/server.h"

#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>
#include <openssl/ssl.h>

#include "k8s/k8s_testing.h"
#include "k8s/openssl.h"
#include "testutil/status_matchers.h"

namespace tessera::webhook {
namespace {

using nlohmann::json;

void Write(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text;
  std::filesystem::rename(tmp, path);  // atomic, as a Secret volume update is
}

// The common name of the CA that issued the certificate the server presents.
std::string IssuerCn(int port, const std::string& ca_pem) {
  httplib::SSLClient client("127.0.0.1", port);
  const std::vector<k8s::X509Ptr> cas = k8s::ReadCertificates(ca_pem);
  X509_STORE* store = X509_STORE_new();  // the client takes it over
  for (const k8s::X509Ptr& ca : cas) X509_STORE_add_cert(store, ca.get());
  client.set_ca_cert_store(store);
  client.enable_server_certificate_verification(true);
  auto res = client.Get("/healthz");
  if (!res || res->status != 200 || cas.empty()) return "";
  // Verified against this CA: the CA's name is the answer.
  char cn[128] = {0};
  X509_NAME_get_text_by_NID(X509_get_subject_name(cas.front().get()), NID_commonName, cn,
                            sizeof(cn));
  return cn;
}

TEST(WebhookServer, ServesReviewsAndRotatesItsCertificateWithoutRestart) {
  auto first = k8s::testing::MakePki("first-ca");
  auto second = k8s::testing::MakePki("second-ca");
  ASSERT_OK(first);
  ASSERT_OK(second);
  const std::string dir = ::testing::TempDir() + "/webhook-certs-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  Write(dir + "/tls.crt", first->server_cert_pem);
  Write(dir + "/tls.key", first->server_key_pem);
  auto certs = CertReloader::Create(dir + "/tls.crt", dir + "/tls.key");
  ASSERT_OK(certs);

  policy::Policy policy = policy::DefaultPolicy();
  Admission admission(&policy, WebhookOptions{}, ClusterView{}, nullptr);
  WebhookServer server(&admission, certs->get(), 4);
  auto port = server.Bind("127.0.0.1", 0);
  ASSERT_OK(port);
  std::thread serving([&server] { server.Run(); });

  EXPECT_EQ(IssuerCn(*port, first->ca_pem), "first-ca");
  EXPECT_EQ(IssuerCn(*port, second->ca_pem), "");  // not trusted yet: the old pair is served

  // A review round trip over TLS.
  {
    httplib::SSLClient client("127.0.0.1", *port);
    client.enable_server_certificate_verification(false);
    json review = {
        {"apiVersion", "admission.k8s.io/v1"},
        {"kind", "AdmissionReview"},
        {"request",
         {{"uid", "r1"},
          {"operation", "CREATE"},
          {"resource", {{"resource", "pods"}}},
          {"namespace", "ml"},
          {"object",
           {{"metadata", {{"name", "p"}, {"namespace", "ml"}}},
            {"spec",
             {{"containers",
               {{{"name", "c"},
                 {"resources", {{"limits", {{"tessera.dev/gpu-cores", "500"}}}}}}}}}}}}}}};
    auto res = client.Post("/validate", review.dump(), "application/json");
    ASSERT_TRUE(res);
    json answer = json::parse(res->body);
    EXPECT_EQ(answer["response"]["uid"], "r1");
    EXPECT_FALSE(answer["response"]["allowed"].get<bool>());
    auto bad = client.Post("/validate", "not json", "application/json");
    ASSERT_TRUE(bad);
    EXPECT_FALSE(json::parse(bad->body)["response"]["allowed"].get<bool>());
  }

  // Rotate: the files change; within a few seconds new handshakes get the new pair.
  Write(dir + "/tls.key", second->server_key_pem);
  Write(dir + "/tls.crt", second->server_cert_pem);
  bool rotated = false;
  for (int i = 0; i < 100 && !rotated; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    rotated = IssuerCn(*port, second->ca_pem) == "second-ca";
  }
  EXPECT_TRUE(rotated);
  EXPECT_EQ((*certs)->loads(), 2);
  // A broken file (half-written key) keeps the last good pair.
  Write(dir + "/tls.key", "garbage");
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_EQ(IssuerCn(*port, second->ca_pem), "second-ca");
  server.Stop();
  serving.join();
  std::filesystem::remove_all(dir);
}

TEST(CertReloader, RefusesMissingOrMismatchedFiles) {
  auto a = k8s::testing::MakePki("a");
  auto b = k8s::testing::MakePki("b");
  ASSERT_OK(a);
  ASSERT_OK(b);
  const std::string dir = ::testing::TempDir() + "/webhook-bad-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  Write(dir + "/tls.crt", a->server_cert_pem);
  Write(dir + "/tls.key", b->server_key_pem);
  auto mismatched = CertReloader::Create(dir + "/tls.crt", dir + "/tls.key");
  ASSERT_FALSE(mismatched.ok());
  EXPECT_NE(mismatched.status().message().find("--tls-key-file"), std::string::npos);
  EXPECT_FALSE(CertReloader::Create(dir + "/none.crt", dir + "/tls.key").ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::webhook
