#include "k8s/k8s_testing.h"

#include <utility>
#include <vector>

#include "k8s/openssl.h"
#include "k8s/pki.h"

namespace tessera::k8s::testing {

StatusOr<Pki> MakePki(const std::string& cn, const std::string& server_names) {
  TESSERA_ASSIGN_OR_RETURN(CertifiedKey ca, MintCa(cn, /*days=*/1));
  TESSERA_ASSIGN_OR_RETURN(CertifiedKey server, MintLeaf(ca, {.common_name = "127.0.0.1",
                                                              .organization = "",
                                                              .usage = CertUsage::kServer,
                                                              .subject_alt_names = server_names,
                                                              .days = 1}));
  TESSERA_ASSIGN_OR_RETURN(CertifiedKey client, MintLeaf(ca, {.common_name = "tessera-test",
                                                              .organization = "system:masters",
                                                              .usage = CertUsage::kClient,
                                                              .subject_alt_names = "",
                                                              .days = 1}));
  Pki pki;
  TESSERA_ASSIGN_OR_RETURN(pki.ca_pem, CertificatePem(ca.cert.get()));
  TESSERA_ASSIGN_OR_RETURN(pki.server_cert_pem, CertificatePem(server.cert.get()));
  TESSERA_ASSIGN_OR_RETURN(pki.server_key_pem, PrivateKeyPem(server.key.get()));
  TESSERA_ASSIGN_OR_RETURN(pki.client_cert_pem, CertificatePem(client.cert.get()));
  TESSERA_ASSIGN_OR_RETURN(pki.client_key_pem, PrivateKeyPem(client.key.get()));
  return pki;
}

FakeApiServer::FakeApiServer(const Pki* pki, bool require_client_cert) {
  if (pki == nullptr) {
    server_ = std::make_unique<httplib::Server>();
  } else {
    tls_ = true;
    ca_pem_ = pki->ca_pem;
    std::vector<X509Ptr> certs = ReadCertificates(pki->server_cert_pem);
    PkeyPtr key = ReadPrivateKey(pki->server_key_pem);
    X509* cert = certs.empty() ? nullptr : certs[0].get();
    X509_STORE* client_cas = nullptr;  // owned by the server's SSL_CTX once given
    if (require_client_cert) {
      client_cas = X509_STORE_new();
      for (const X509Ptr& ca : ReadCertificates(pki->ca_pem)) {
        X509_STORE_add_cert(client_cas, ca.get());
      }
    }
    server_ = std::make_unique<httplib::SSLServer>(cert, key.get(), client_cas);
  }
  server_->set_keep_alive_timeout(1);
  server_->set_tcp_nodelay(true);
}

FakeApiServer::~FakeApiServer() { Stop(); }

Status FakeApiServer::Start() {
  if (!server_->is_valid()) return InternalError("fake API server: invalid setup");
  port_ = server_->bind_to_any_port("127.0.0.1");
  if (port_ <= 0) return UnavailableError("fake API server: cannot bind 127.0.0.1:0");
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return Status::Ok();
}

void FakeApiServer::Stop() {
  stopping_ = true;
  if (thread_.joinable()) {
    server_->stop();
    thread_.join();
  }
}

std::string FakeApiServer::url() const {
  return std::string(tls_ ? "https" : "http") + "://127.0.0.1:" + std::to_string(port_);
}

Config FakeApiServer::ClientConfig() const {
  Config config;
  config.server = url();
  config.ca_pem = ca_pem_;
  config.qps = 0;
  config.timeout = std::chrono::seconds(10);
  config.user_agent = "tessera-test";
  return config;
}

void ChunkStream::Push(std::string chunk) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    chunks_.push_back(std::move(chunk));
  }
  cv_.notify_all();
}

void ChunkStream::End() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ended_ = true;
  }
  cv_.notify_all();
}

void ChunkStream::Serve(const std::shared_ptr<ChunkStream>& stream, httplib::Response& res,
                        const FakeApiServer& server) {
  const FakeApiServer* srv = &server;
  res.set_chunked_content_provider("application/json",
                                   [stream, srv](std::size_t, httplib::DataSink& sink) {
                                     stream->served_ = true;
                                     std::unique_lock<std::mutex> lock(stream->mu_);
                                     for (;;) {
                                       if (!stream->chunks_.empty()) {
                                         std::string chunk = std::move(stream->chunks_.front());
                                         stream->chunks_.pop_front();
                                         lock.unlock();
                                         return sink.write(chunk.data(), chunk.size());
                                       }
                                       if (stream->ended_) {
                                         lock.unlock();
                                         sink.done();
                                         return true;
                                       }
                                       if (srv->stopping()) return false;
                                       stream->cv_.wait_for(lock, std::chrono::milliseconds(5));
                                     }
                                   });
}

bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace tessera::k8s::testing
