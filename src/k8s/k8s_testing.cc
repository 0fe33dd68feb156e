#include "k8s/k8s_testing.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <utility>
#include <vector>

namespace tessera::k8s::testing {
namespace {

struct KeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CertDeleter {
  void operator()(X509* x) const { X509_free(x); }
};
struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyDeleter>;
using Cert = std::unique_ptr<X509, CertDeleter>;

Key NewKey() { return Key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256")); }

bool AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) return false;
  const bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

// A certificate for `key`, signed by issuer/issuer_key (self-signed when issuer is null).
Cert NewCert(EVP_PKEY* key, const char* cn, const char* org, X509* issuer, EVP_PKEY* issuer_key,
             long serial, const std::vector<std::pair<int, const char*>>& extensions) {
  Cert cert(X509_new());
  X509* x = cert.get();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 24 * 3600);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn),
                             -1, -1, 0);
  if (org != nullptr) {
    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(org),
                               -1, -1, 0);
  }
  X509_set_issuer_name(x, issuer != nullptr ? X509_get_subject_name(issuer) : name);
  for (const auto& [nid, value] : extensions) {
    if (!AddExtension(x, issuer != nullptr ? issuer : x, nid, value)) return nullptr;
  }
  if (X509_sign(x, issuer_key != nullptr ? issuer_key : key, EVP_sha256()) == 0) return nullptr;
  return cert;
}

std::string ToPem(X509* cert) {
  std::unique_ptr<BIO, BioDeleter> bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(bio.get(), cert);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(size));
}

std::string ToPem(EVP_PKEY* key) {
  std::unique_ptr<BIO, BioDeleter> bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(size));
}

X509* ReadCert(const std::string& pem) {
  std::unique_ptr<BIO, BioDeleter> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
}

EVP_PKEY* ReadKey(const std::string& pem) {
  std::unique_ptr<BIO, BioDeleter> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr);
}

}  // namespace

StatusOr<Pki> MakePki(const std::string& cn, const std::string& server_names) {
  Key ca_key = NewKey();
  Key server_key = NewKey();
  Key client_key = NewKey();
  if (!ca_key || !server_key || !client_key) return InternalError("EC key generation failed");
  Cert ca = NewCert(ca_key.get(), cn.c_str(), nullptr, nullptr, nullptr, 1,
                    {{NID_basic_constraints, "critical,CA:TRUE"},
                     {NID_key_usage, "critical,keyCertSign,cRLSign"},
                     {NID_subject_key_identifier, "hash"}});
  if (!ca) return InternalError("CA certificate failed");
  Cert server = NewCert(server_key.get(), "127.0.0.1", nullptr, ca.get(), ca_key.get(), 2,
                        {{NID_basic_constraints, "critical,CA:FALSE"},
                         {NID_key_usage, "critical,digitalSignature"},
                         {NID_ext_key_usage, "serverAuth"},
                         {NID_subject_alt_name, server_names.c_str()}});
  Cert client =
      NewCert(client_key.get(), "tessera-test", "system:masters", ca.get(), ca_key.get(), 3,
              {{NID_basic_constraints, "critical,CA:FALSE"},
               {NID_key_usage, "critical,digitalSignature"},
               {NID_ext_key_usage, "clientAuth"}});
  if (!server || !client) return InternalError("leaf certificate failed");
  Pki pki;
  pki.ca_pem = ToPem(ca.get());
  pki.server_cert_pem = ToPem(server.get());
  pki.server_key_pem = ToPem(server_key.get());
  pki.client_cert_pem = ToPem(client.get());
  pki.client_key_pem = ToPem(client_key.get());
  ERR_clear_error();
  return pki;
}

FakeApiServer::FakeApiServer(const Pki* pki, bool require_client_cert) {
  if (pki == nullptr) {
    server_ = std::make_unique<httplib::Server>();
  } else {
    tls_ = true;
    ca_pem_ = pki->ca_pem;
    Cert cert(ReadCert(pki->server_cert_pem));
    Key key(ReadKey(pki->server_key_pem));
    X509_STORE* client_cas = nullptr;  // owned by the server's SSL_CTX once given
    if (require_client_cert) {
      client_cas = X509_STORE_new();
      Cert ca(ReadCert(pki->ca_pem));
      X509_STORE_add_cert(client_cas, ca.get());
    }
    server_ = std::make_unique<httplib::SSLServer>(cert.get(), key.get(), client_cas);
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
